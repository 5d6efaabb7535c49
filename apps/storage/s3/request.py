"""The request as S3 sees it: the path and query exactly as sent (SigV4 signs them so), the
headers with lower-case names, the bucket, the key and the operation they name."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote

from django.http import HttpRequest

from .errors import S3Error, not_implemented

ENDPOINT = "/s3"

# Query parameters that name a sub-resource or an operation. Any other parameter (``x-id``,
# ``response-*``, the X-Amz-* of a presigned URL...) does not change the operation.
_SUBRESOURCES = frozenset({
    "accelerate", "acl", "analytics", "attributes", "cors", "delete", "encryption",
    "intelligent-tiering", "inventory", "legal-hold", "lifecycle", "list-type", "location",
    "logging", "metrics", "notification", "object-lock", "ownershipControls", "partNumber",
    "policy", "policyStatus", "publicAccessBlock", "replication", "requestPayment", "restore",
    "retention", "select", "tagging", "torrent", "uploadId", "uploads", "versionId",
    "versioning", "versions", "website",
})


@dataclass(frozen=True)
class S3Request:
    method: str
    raw_path: str  # as sent, percent-encoded (what SigV4 signed)
    raw_query: str
    headers: dict[str, str]  # lower-case names
    query: dict[str, str]  # decoded; the first value of each name
    bucket: str | None
    key: str | None  # decoded; None for the service or a bucket
    operation: str

    @property
    def resource(self) -> str:
        """The ``Resource`` of an error body: the path as sent."""
        return self.raw_path


def raw_target(request: HttpRequest) -> tuple[str, str]:
    """The path and query as the client sent them. Under ASGI they are ``raw_path`` and
    ``query_string`` of the scope (Daphne passes the request line's bytes unchanged); the
    decoded ``request.path`` cannot be used, since SigV4 signs the encoded form."""
    scope = getattr(request, "scope", None)
    if scope is not None and scope.get("raw_path"):
        raw_path = scope["raw_path"].decode("latin-1")
        raw_query = (scope.get("query_string") or b"").decode("latin-1")
    else:  # WSGI: the best available reconstruction
        raw_path = quote(request.path, safe="/-_.~!$&'()*+,;=:@%")
        raw_query = request.META.get("QUERY_STRING", "")
    return raw_path, raw_query


def header_map(request: HttpRequest) -> dict[str, str]:
    """Every request header with a lower-case name (repeated ones joined by commas)."""
    return {name.lower(): value for name, value in request.headers.items()}


def _decode(raw: str, what: str) -> str:
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise S3Error("InvalidURI", f"Couldn't parse the specified URI: the {what} is not "
                      "valid UTF-8 once percent-decoded.", 400) from None


def split_path(raw_path: str) -> tuple[str | None, str | None]:
    """``/s3/<bucket>/<key>`` → (bucket, key), decoded; (None, None) for ``/s3/``."""
    rest = raw_path[len(ENDPOINT):] if raw_path.startswith(ENDPOINT) else raw_path
    if rest in ("", "/"):
        return None, None
    if not rest.startswith("/"):
        raise S3Error("InvalidURI", "Couldn't parse the specified URI.", 400)
    bucket_raw, _, key_raw = rest[1:].partition("/")
    bucket = _decode(bucket_raw, "bucket")
    key = _decode(key_raw, "key") if key_raw else None
    return bucket, key


def operation_of(method: str, bucket: str | None, key: str | None,
                 query: dict[str, str], headers: dict[str, str]) -> str:
    """The S3 operation a request names; ``NotImplemented`` for one this endpoint lacks."""
    subs = {name for name in query if name in _SUBRESOURCES}
    if bucket is None:
        if method == "GET" and not subs:
            return "ListBuckets"
        raise not_implemented(f"{method} on the service")
    if key is None:
        table = {
            ("GET", frozenset({"location"})): "GetBucketLocation",
            ("POST", frozenset({"delete"})): "DeleteObjects",
            ("GET", frozenset({"list-type"})): "ListObjectsV2",
            ("GET", frozenset()): "ListObjects",
            ("HEAD", frozenset()): "HeadBucket",
        }
        name = table.get((method, frozenset(subs)))
        if name == "ListObjectsV2" and query.get("list-type") != "2":
            raise not_implemented(f"list-type={query.get('list-type')}")
        if name is None:
            raise not_implemented(f"{method} of the bucket with ?{'&'.join(sorted(subs))}"
                                  if subs else f"{method} of the bucket")
        return name
    copy = "x-amz-copy-source" in headers
    if subs == {"versionId"} and query["versionId"] in ("", "null"):
        subs = set()  # the only version there is
    table = {
        ("PUT", frozenset()): "CopyObject" if copy else "PutObject",
        ("PUT", frozenset({"partNumber", "uploadId"})):
            "UploadPartCopy" if copy else "UploadPart",
        ("GET", frozenset()): "GetObject",
        ("GET", frozenset({"uploadId"})): "ListParts",
        ("HEAD", frozenset()): "HeadObject",
        ("DELETE", frozenset()): "DeleteObject",
        ("DELETE", frozenset({"uploadId"})): "AbortMultipartUpload",
        ("POST", frozenset({"uploads"})): "CreateMultipartUpload",
        ("POST", frozenset({"uploadId"})): "CompleteMultipartUpload",
    }
    name = table.get((method, frozenset(subs)))
    if name is None or name == "UploadPartCopy":
        what = name or (f"{method} of an object with ?{'&'.join(sorted(subs))}" if subs
                        else f"{method} of an object")
        raise not_implemented(what)
    return name


def parse_request(request: HttpRequest) -> S3Request:
    method = (request.method or "GET").upper()
    raw_path, raw_query = raw_target(request)
    headers = header_map(request)
    query: dict[str, str] = {}
    try:
        pairs = parse_qsl(raw_query, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise S3Error("InvalidURI", "Couldn't parse the specified URI: the query is not "
                      "valid UTF-8 once percent-decoded.", 400) from None
    for name, value in pairs:
        query.setdefault(name, value)
    bucket, key = split_path(raw_path)
    operation = operation_of(method, bucket, key, query, headers)
    return S3Request(method, raw_path, raw_query, headers, query, bucket, key, operation)
