"""Bucket operations: ListObjectsV2 (and V1), DeleteObjects, HeadBucket, GetBucketLocation,
ListBuckets. There is one bucket (``RTC_S3_BUCKET``); a listing must stay under the caller's
prefix, and a batch delete answers each key outside it with its own ``AccessDenied``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import quote

from django.conf import settings
from django.http import HttpResponseBase

from ..base import InvalidKey, ListPage
from ..limits import usage_forget
from ..presign import REGION
from .auth import authorize_key, authorize_prefix
from .errors import S3Error, invalid_argument, malformed_xml
from .http import Ctx, empty_response, quote_etag, xml_response
from .xml import ET, add, add_all, children, element, parse, text_of, timestamp

MAX_KEYS = 1000
MAX_DELETE_BODY = 2 * 1024 * 1024  # 1000 keys of 1024 bytes, escaped, fit
BUCKET_CREATED = datetime(2026, 1, 1, tzinfo=UTC)  # S3 shows one; ours has no real date


def _max_keys(raw: str | None) -> int:
    try:
        value = int(raw) if raw not in (None, "") else MAX_KEYS
    except ValueError:
        value = -1
    if value < 0:
        raise invalid_argument("Provided max-keys not an integer or within integer range",
                               name="max-keys", value=raw or "")
    return min(value, MAX_KEYS)


def _encoder(query: dict[str, str]) -> Callable[[str], str]:
    encoding = query.get("encoding-type")
    if encoding not in (None, "url"):
        raise invalid_argument("Invalid Encoding Method specified in Request",
                               name="encoding-type", value=encoding)
    return (lambda text: quote(text, safe="/")) if encoding == "url" else (lambda text: text)


def _page(ctx: Ctx, prefix: str, *, delimiter: str | None, max_keys: int,
          token: str | None, start_after: str | None) -> ListPage:
    authorize_prefix(ctx.caller.principal, prefix)
    if max_keys == 0:
        return ListPage([], [], False, None)
    return ctx.store.list(prefix, delimiter=delimiter, max_keys=max_keys,
                          continuation_token=token, start_after=start_after)


def _entries(root: ET.Element, page: ListPage, encode: Callable[[str], str]) -> None:
    for obj in page.objects:
        node = add(root, "Contents")
        add_all(node, {"Key": encode(obj.key), "LastModified": timestamp(obj.last_modified),
                       "ETag": quote_etag(obj.etag), "Size": obj.size,
                       "StorageClass": "STANDARD"})
    for common in page.common_prefixes:
        add(add(root, "CommonPrefixes"), "Prefix", encode(common))


def list_objects_v2(ctx: Ctx) -> HttpResponseBase:
    query = ctx.req.query
    encode = _encoder(query)
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter") or None
    max_keys = _max_keys(query.get("max-keys"))
    token = query.get("continuation-token") or None
    start_after = query.get("start-after") or None
    page = _page(ctx, prefix, delimiter=delimiter, max_keys=max_keys, token=token,
                 start_after=start_after)
    root = element("ListBucketResult")
    add_all(root, {
        "Name": ctx.req.bucket, "Prefix": encode(prefix),
        "Delimiter": encode(delimiter) if delimiter else None, "MaxKeys": max_keys,
        "EncodingType": query.get("encoding-type"),
        "KeyCount": len(page.objects) + len(page.common_prefixes),
        "IsTruncated": page.is_truncated, "ContinuationToken": token,
        "NextContinuationToken": page.next_token if page.is_truncated else None,
        "StartAfter": encode(start_after) if start_after else None,
    })
    _entries(root, page, encode)
    return xml_response(root)


def list_objects_v1(ctx: Ctx) -> HttpResponseBase:
    """The original's ListObjects: ``marker`` is where the listing starts after; a marker that
    is a common prefix skips everything under it."""
    query = ctx.req.query
    encode = _encoder(query)
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter") or None
    max_keys = _max_keys(query.get("max-keys"))
    marker = query.get("marker") or None
    start_after = marker
    if marker and delimiter and marker.endswith(delimiter):
        start_after = marker + "\U0010ffff"  # past every key under that common prefix
    page = _page(ctx, prefix, delimiter=delimiter, max_keys=max_keys, token=None,
                 start_after=start_after)
    last = max([o.key for o in page.objects] + page.common_prefixes, default=None)
    root = element("ListBucketResult")
    add_all(root, {
        "Name": ctx.req.bucket, "Prefix": prefix, "Marker": encode(marker or ""),
        "Delimiter": encode(delimiter) if delimiter else None, "MaxKeys": max_keys,
        "EncodingType": query.get("encoding-type"), "IsTruncated": page.is_truncated,
        "NextMarker": encode(last) if page.is_truncated and last else None,
    })
    _entries(root, page, encode)
    return xml_response(root)


def delete_objects(ctx: Ctx) -> HttpResponseBase:
    root = parse(ctx.small_body(MAX_DELETE_BODY), "Delete")
    quiet = (text_of(root, "Quiet") or "").strip().lower() == "true"
    keys = [text_of(node, "Key") for node in children(root, "Object")]
    if not keys or len(keys) > MAX_KEYS or any(k is None for k in keys):
        raise malformed_xml()
    allowed: list[str] = []
    errors: list[tuple[str, str, str]] = []
    for key in keys:
        try:
            allowed.append(authorize_key(ctx.caller.principal, key or ""))
        except InvalidKey as exc:
            errors.append((key or "", "InvalidArgument", str(exc)))
        except S3Error as exc:
            errors.append((key or "", exc.code, exc.message))
    failed = {f.key: f for f in ctx.store.delete_many(allowed)} if allowed else {}
    if allowed:
        usage_forget(ctx.user_id)
    result = element("DeleteResult")
    for key in dict.fromkeys(allowed):
        if key in failed:
            errors.append((key, failed[key].code, failed[key].message))
        elif not quiet:
            add(add(result, "Deleted"), "Key", key)
    for key, code, message in errors:
        add_all(add(result, "Error"), {"Key": key, "Code": code, "Message": message})
    return xml_response(result)


def head_bucket(ctx: Ctx) -> HttpResponseBase:
    return empty_response(200, {"x-amz-bucket-region": REGION})


def get_bucket_location(ctx: Ctx) -> HttpResponseBase:
    return xml_response(element("LocationConstraint"))  # empty: us-east-1


def list_buckets(ctx: Ctx) -> HttpResponseBase:
    root = element("ListAllMyBucketsResult")
    owner = add(root, "Owner")
    owner_id = (ctx.prefix or "service").rstrip("/")
    add_all(owner, {"ID": owner_id, "DisplayName": owner_id})
    bucket = add(add(root, "Buckets"), "Bucket")
    add_all(bucket, {"Name": settings.RTC_S3_BUCKET, "CreationDate": timestamp(BUCKET_CREATED)})
    return xml_response(root)
