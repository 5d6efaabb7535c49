"""AWS Signature Version 4 as S3 checks it: parsing, verification and presigning.

The ``/s3/`` endpoint authenticates every request here. ``parse`` reads the Authorization header
form or the presigned query form into a ``SignedRequest`` without any secret; the caller looks the
access key up, then ``verify`` rebuilds the canonical request exactly as S3 does (the path as
sent, never normalised or encoded twice; the query decoded, re-encoded and sorted; signed
header values trimmed) and returns the signing key that ``body_reader`` needs to check chunk
signatures of streaming uploads. ``presign`` makes query-form URLs that ``verify`` accepts.

Every refusal is a ``SignatureError`` carrying the S3 error code and HTTP status; nothing here
touches the database or the store. The body side (plain and ``aws-chunked`` payloads, checksums)
lives in ``apps.storage.chunked``.
"""

from __future__ import annotations

import hashlib
import hmac
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import BinaryIO, cast
from urllib.parse import quote, unquote_to_bytes, urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
STREAMING_PAYLOADS = frozenset(
    {STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER}
)
# SigV4a (ECDSA) streaming values: recognised so that they get a clear refusal.
_SIGV4A_PAYLOADS = frozenset(
    {"STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD", "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER"}
)
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_EXPIRES = 604800  # a week: S3's ceiling for X-Amz-Expires
AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_AMZ_DATE = re.compile(r"\d{8}T\d{6}Z")
_UNRESERVED = "-_.~"  # with ASCII letters and digits: what SigV4 never percent-encodes
_QUERY_AUTH = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Signature",
    "X-Amz-Date",
    "X-Amz-SignedHeaders",
    "X-Amz-Expires",
)
_ErrorFactory = Callable[[str], "SignatureError"]
_UNSUPPORTED = (
    "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
)


class SignatureError(Exception):
    """A request S3 would refuse. ``code``: the S3 error code; ``status``: the HTTP status;
    ``detail``: extra elements S3 puts in its XML error (``RequestTime``, ``StringToSign``...)."""

    def __init__(
        self, code: str, message: str, status: int = 403, *, detail: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.detail: dict[str, str] = dict(detail or {})


@dataclass(frozen=True)
class SignedRequest:
    access_key_id: str
    region: str
    service: str
    amz_date: datetime  # aware, UTC
    date_scope: str  # "YYYYMMDD/region/service/aws4_request"
    signed_headers: tuple[str, ...]
    signature: str
    presigned: bool  # query-string form
    expires_in: int | None  # X-Amz-Expires of the query form (1..604800)
    session_token: str | None  # X-Amz-Security-Token header or query parameter
    payload_hash: str  # hex sha256 | "UNSIGNED-PAYLOAD" | "STREAMING-..." value

    @property
    def timestamp(self) -> str:
        """The request time as it appears in strings to sign."""
        return self.amz_date.strftime(AMZ_DATE_FORMAT)

    @property
    def streaming(self) -> bool:
        return self.payload_hash in STREAMING_PAYLOADS


# --- canonical request ---------------------------------------------------------------------


def parse_query(raw_query: str) -> list[tuple[bytes, bytes]]:
    """The query's parameters percent-decoded to bytes, in order; ``+`` stays a plus sign (SigV4
    clients encode a space as ``%20``)."""
    pairs = []
    for piece in raw_query.split("&"):
        if not piece:
            continue
        name, _, value = piece.partition("=")
        pairs.append((unquote_to_bytes(name), unquote_to_bytes(value)))
    return pairs


def _encode(raw: bytes) -> str:
    return quote(raw, safe=_UNRESERVED)


def canonical_query(raw_query: str, *, exclude_signature: bool = False) -> str:
    """Parameters decoded then encoded the SigV4 way, sorted by encoded name then value. The
    query form leaves its own ``X-Amz-Signature`` out."""
    pairs = []
    for name, value in parse_query(raw_query):
        if exclude_signature and name == b"X-Amz-Signature":
            continue
        pairs.append((_encode(name), _encode(value)))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def canonical_uri(raw_path: str, *, normalize: bool = False) -> str:
    """S3 (``normalize=False``) signs the path as sent: escapes stay as they are and only bytes
    that may not appear raw in a SigV4 path are encoded (so a decoded path gives the same result
    as its SigV4 encoding). Other services (``normalize=True``, the generic test suite) remove
    dot segments and empty segments and then encode every byte, ``%`` included."""
    if not raw_path:
        return "/"
    if not normalize:
        return quote(raw_path.encode("utf-8"), safe="/%" + _UNRESERVED)
    path = posixpath.normpath(raw_path) if raw_path != "/" else "/"
    path = re.sub("/+", "/", path)
    if raw_path.endswith("/") and not path.endswith("/"):
        path += "/"
    return quote(path.encode("utf-8"), safe="/" + _UNRESERVED)


def canonical_headers(headers: Mapping[str, str], signed_headers: tuple[str, ...]) -> str:
    """``name:value`` lines for the signed headers, values trimmed and inner whitespace runs
    collapsed to one space; a header signed but absent counts as empty (and so fails)."""
    return "".join(f"{name}:{' '.join(headers.get(name, '').split())}\n" for name in signed_headers)


def canonical_request(
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
    signed_headers: tuple[str, ...],
    payload_hash: str,
    *,
    presigned: bool = False,
    normalize_path: bool = False,
) -> str:
    return "\n".join(
        (
            method.upper(),
            canonical_uri(raw_path, normalize=normalize_path),
            canonical_query(raw_query, exclude_signature=presigned),
            canonical_headers(headers, signed_headers),
            ";".join(signed_headers),
            payload_hash,
        )
    )


def string_to_sign(timestamp: str, date_scope: str, creq: str) -> str:
    digest = hashlib.sha256(creq.encode("utf-8")).hexdigest()
    return f"{ALGORITHM}\n{timestamp}\n{date_scope}\n{digest}"


def signing_key(secret_key: str, date: str, region: str, service: str) -> bytes:
    key = f"AWS4{secret_key}".encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    return key


def sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


# --- parsing -------------------------------------------------------------------------------


def parse(method: str, raw_path: str, raw_query: str, headers: Mapping[str, str]) -> SignedRequest:
    """The SigV4 claims of a request (``headers`` with lower-case names); no secret involved.
    Refuses anonymous requests, other signature versions and malformed ones."""
    authorization = headers.get("authorization", "").strip()
    params: dict[str, list[str]] = {}
    for name, value in parse_query(raw_query):
        params.setdefault(name.decode("utf-8", "replace"), []).append(
            value.decode("utf-8", "replace")
        )
    query_form = any(name in params for name in _QUERY_AUTH)
    if authorization and query_form:
        raise SignatureError(
            "InvalidArgument",
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
            "Signature query string parameter or the Authorization header should be specified",
            400,
        )
    if query_form:
        return _parse_query_form(params, headers)
    if authorization:
        return _parse_header_form(authorization, headers)
    if "Signature" in params and "AWSAccessKeyId" in params:
        raise SignatureError("InvalidRequest", _UNSUPPORTED, 400)
    raise SignatureError("AccessDenied", "Access Denied")


def _parse_header_form(authorization: str, headers: Mapping[str, str]) -> SignedRequest:
    malformed = _header_error
    scheme, _, rest = authorization.partition(" ")
    if scheme != ALGORITHM:
        if scheme in ("AWS", "AWS4-ECDSA-P256-SHA256"):
            raise SignatureError("InvalidRequest", _UNSUPPORTED, 400)
        raise SignatureError("InvalidArgument", "Unsupported Authorization Type", 400)
    parts: dict[str, str] = {}
    for item in rest.split(","):
        name, eq, value = item.strip().partition("=")
        if not eq or name in parts:
            raise malformed(f"the component {item.strip()!r} is not valid.")
        parts[name] = value.strip()
    if set(parts) != {"Credential", "SignedHeaders", "Signature"}:
        raise malformed(
            "the authorization header requires three components: Credential, SignedHeaders, "
            "and Signature."
        )
    access_key, date, region, service = _credential(parts["Credential"], malformed)
    signed = _signed_headers(parts["SignedHeaders"], malformed)
    signature = _signature(parts["Signature"], malformed)

    raw_date = headers.get("x-amz-date", "").strip()
    if raw_date:
        amz_date = _amz_date(raw_date)
    else:
        amz_date = _http_date(headers.get("date", ""))
    if amz_date is None:
        raise SignatureError(
            "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header"
        )
    if amz_date.strftime("%Y%m%d") != date:
        raise malformed("Invalid credential date. Date is not the same as X-Amz-Date.")

    payload_hash = headers.get("x-amz-content-sha256", "").strip()
    if not payload_hash:
        raise SignatureError(
            "InvalidRequest", "Missing required header for this request: x-amz-content-sha256", 400
        )
    _check_payload_hash(payload_hash)
    return SignedRequest(
        access_key_id=access_key,
        region=region,
        service=service,
        amz_date=amz_date,
        date_scope=f"{date}/{region}/{service}/aws4_request",
        signed_headers=signed,
        signature=signature,
        presigned=False,
        expires_in=None,
        session_token=headers.get("x-amz-security-token") or None,
        payload_hash=payload_hash,
    )


def _parse_query_form(params: dict[str, list[str]], headers: Mapping[str, str]) -> SignedRequest:
    def malformed(why: str) -> SignatureError:
        return SignatureError("AuthorizationQueryParametersError", why, 400)

    if any(name not in params for name in _QUERY_AUTH):
        raise malformed(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, "
            "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."
        )
    for name in (*_QUERY_AUTH, "X-Amz-Security-Token"):
        if len(params.get(name, ())) > 1:
            raise malformed(f"{name} must appear only once.")
    value = {name: params[name][0] for name in _QUERY_AUTH}
    if value["X-Amz-Algorithm"] != ALGORITHM:
        raise malformed('X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"')

    credential_error = _query_error
    access_key, date, region, service = _credential(value["X-Amz-Credential"], credential_error)
    signed = _signed_headers(value["X-Amz-SignedHeaders"], malformed)
    signature = _signature(value["X-Amz-Signature"], malformed)
    amz_date = _amz_date(value["X-Amz-Date"])
    if amz_date is None:
        raise malformed("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
    if amz_date.strftime("%Y%m%d") != date:
        raise credential_error("Invalid credential date. Date is not the same as X-Amz-Date.")
    raw_expires = value["X-Amz-Expires"]
    if not re.fullmatch(r"-?\d{1,10}", raw_expires):
        raise malformed("X-Amz-Expires should be a number")
    expires = int(raw_expires)
    if expires < 1:
        raise malformed("X-Amz-Expires must be non-negative and at least 1")
    if expires > MAX_EXPIRES:
        raise malformed("X-Amz-Expires must be less than a week (in seconds) that is 604800")

    # A presigned URL says nothing of its body, unless the signer also signed the header.
    payload_hash = headers.get("x-amz-content-sha256", "").strip() or UNSIGNED_PAYLOAD
    _check_payload_hash(payload_hash)
    token = params.get("X-Amz-Security-Token")
    return SignedRequest(
        access_key_id=access_key,
        region=region,
        service=service,
        amz_date=amz_date,
        date_scope=f"{date}/{region}/{service}/aws4_request",
        signed_headers=signed,
        signature=signature,
        presigned=True,
        expires_in=expires,
        session_token=token[0] if token and token[0] else None,
        payload_hash=payload_hash,
    )


def _credential(raw: str, error: _ErrorFactory) -> tuple[str, str, str, str]:
    parts = raw.split("/")
    if (
        len(parts) != 5
        or not all(parts)
        or parts[4] != "aws4_request"
        or not re.fullmatch(r"\d{8}", parts[1])
    ):
        raise error(
            "the Credential is mal-formed; expecting "
            '"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".'
        )
    return parts[0], parts[1], parts[2], parts[3]


def _signed_headers(raw: str, error: _ErrorFactory) -> tuple[str, ...]:
    names = tuple(raw.split(";"))
    if not all(names) or len(set(names)) != len(names) or any(n != n.lower() for n in names):
        raise error("SignedHeaders must be distinct lower-case header names separated by ';'.")
    if "host" not in names:
        raise error("the host header must be signed.")
    return names


def _signature(raw: str, error: _ErrorFactory) -> str:
    if not _HEX64.fullmatch(raw):
        raise error("the Signature must be 64 hexadecimal characters.")
    return raw.lower()


def _amz_date(raw: str) -> datetime | None:
    if not _AMZ_DATE.fullmatch(raw):
        return None
    try:
        return datetime.strptime(raw, AMZ_DATE_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None


def _http_date(raw: str) -> datetime | None:
    if not raw.strip():
        return None
    try:
        parsed = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(UTC)


def _check_payload_hash(value: str) -> None:
    if value in _SIGV4A_PAYLOADS:
        raise SignatureError("InvalidRequest", _UNSUPPORTED, 400)
    if value == UNSIGNED_PAYLOAD or value in STREAMING_PAYLOADS or _HEX64.fullmatch(value):
        return
    raise SignatureError(
        "InvalidArgument",
        "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, "
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER "
        "or a valid sha256 value.",
        400,
    )


def _header_error(why: str) -> SignatureError:
    return SignatureError(
        "AuthorizationHeaderMalformed", f"The authorization header is malformed; {why}", 400
    )


def _query_error(why: str) -> SignatureError:
    return SignatureError(
        "AuthorizationQueryParametersError",
        f"Error parsing the X-Amz-Credential parameter; {why}",
        400,
    )


# --- verification --------------------------------------------------------------------------


def verify(
    req: SignedRequest,
    *,
    secret_key: str,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
    now: datetime,
    max_skew: int = 900,
    region: str | None = None,
    service: str | None = "s3",
) -> bytes:
    """Check ``req`` against the request it came from; returns the signing key (for chunk
    signatures). ``region``/``service``, when given, are the only scope values accepted."""
    malformed = _query_error if req.presigned else _header_error
    if service is not None and req.service != service:
        raise malformed(f"incorrect service {req.service!r}. This endpoint belongs to {service!r}.")
    if region is not None and req.region != region:
        error = malformed(f"the region {req.region!r} is wrong; expecting {region!r}")
        error.detail["Region"] = region
        raise error
    _check_time(req, now, max_skew)
    if req.presigned:
        # A presigned URL travels to third parties: they may not add x-amz-* headers
        # (x-amz-copy-source, x-amz-meta-*...) that its signer did not sign.
        unsigned = sorted(
            name for name in headers if name.startswith("x-amz-") and name not in req.signed_headers
        )
        if unsigned:
            raise SignatureError(
                "AccessDenied",
                "There were headers present in the request which were not signed",
                detail={"HeadersNotSigned": ", ".join(unsigned)},
            )

    creq = canonical_request(
        method,
        raw_path,
        raw_query,
        headers,
        req.signed_headers,
        req.payload_hash,
        presigned=req.presigned,
    )
    sts = string_to_sign(req.timestamp, req.date_scope, creq)
    date, scope_region, scope_service, _ = req.date_scope.split("/")
    key = signing_key(secret_key, date, scope_region, scope_service)
    if not hmac.compare_digest(sign(key, sts), req.signature):
        raise SignatureError(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. "
            "Check your key and signing method.",
            detail={
                "AWSAccessKeyId": req.access_key_id,
                "StringToSign": sts,
                "SignatureProvided": req.signature,
                "CanonicalRequest": creq,
            },
        )
    return key


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_time(req: SignedRequest, now: datetime, max_skew: int) -> None:
    if req.presigned:
        if req.amz_date - now > timedelta(seconds=max_skew):
            raise SignatureError("AccessDenied", "Request is not valid yet")
        expires_at = req.amz_date + timedelta(seconds=req.expires_in or 0)
        if now > expires_at:
            raise SignatureError(
                "AccessDenied",
                "Request has expired",
                detail={
                    "X-Amz-Expires": str(req.expires_in),
                    "Expires": _iso(expires_at),
                    "ServerTime": _iso(now),
                },
            )
        return
    if abs(now - req.amz_date) > timedelta(seconds=max_skew):
        raise SignatureError(
            "RequestTimeTooSkewed",
            "The difference between the request time and the current time is too large.",
            detail={
                "RequestTime": req.timestamp,
                "ServerTime": _iso(now),
                "MaxAllowedSkewMilliseconds": str(max_skew * 1000),
            },
        )


# --- bodies --------------------------------------------------------------------------------


def body_reader(
    req: SignedRequest, stream: BinaryIO, *, headers: Mapping[str, str], signing_key: bytes
) -> BinaryIO:
    """The decoded, verified payload of ``stream`` as a non-seekable file (see
    ``apps.storage.chunked.PayloadReader``); checks the framing headers at once."""
    # Imported here: chunked builds on this module's errors and signing primitives.
    from apps.storage.chunked import PayloadReader

    return cast(BinaryIO, PayloadReader(req, stream, headers=headers, signing_key=signing_key))


# --- presigning ----------------------------------------------------------------------------


def presign(
    *,
    method: str,
    base_url: str,
    bucket: str,
    key: str,
    access_key_id: str,
    secret_key: str,
    session_token: str | None,
    region: str,
    expires_in: int,
    now: datetime,
    extra_query: Mapping[str, str] | None = None,
) -> str:
    """A path-style query-form URL ``<base_url>/s3/<bucket>/<key>?X-Amz-...`` signing only the
    host, with an unsigned payload: usable by any HTTP client as is."""
    if not 1 <= expires_in <= MAX_EXPIRES:
        raise ValueError(f"expires_in must be within 1..{MAX_EXPIRES}")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url must be an absolute http(s) URL, not {base_url!r}")
    host = parts.hostname
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if parts.port is not None and parts.port != {"http": 80, "https": 443}[parts.scheme]:
        host = f"{host}:{parts.port}"
    path = (
        f"{parts.path.rstrip('/')}/s3/{quote(bucket.encode('utf-8'), safe=_UNRESERVED)}/"
        f"{quote(key.encode('utf-8'), safe='/' + _UNRESERVED)}"
    )
    moment = now.astimezone(UTC)
    date = moment.strftime("%Y%m%d")
    query: dict[str, str] = dict(extra_query or {})
    query.update(
        {
            "X-Amz-Algorithm": ALGORITHM,
            "X-Amz-Credential": f"{access_key_id}/{date}/{region}/s3/aws4_request",
            "X-Amz-Date": moment.strftime(AMZ_DATE_FORMAT),
            "X-Amz-Expires": str(expires_in),
            "X-Amz-SignedHeaders": "host",
        }
    )
    if session_token:
        query["X-Amz-Security-Token"] = session_token
    raw_query = "&".join(
        f"{_encode(name.encode('utf-8'))}={_encode(value.encode('utf-8'))}"
        for name, value in query.items()
    )
    creq = canonical_request(
        method, path, raw_query, {"host": host}, ("host",), UNSIGNED_PAYLOAD, presigned=True
    )
    sts = string_to_sign(moment.strftime(AMZ_DATE_FORMAT), f"{date}/{region}/s3/aws4_request", creq)
    signature = sign(signing_key(secret_key, date, region, "s3"), sts)
    return f"{parts.scheme}://{parts.netloc}{path}?{raw_query}&X-Amz-Signature={signature}"
