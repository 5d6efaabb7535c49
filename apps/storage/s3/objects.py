"""Object operations: PutObject, GetObject (Range), HeadObject, DeleteObject, CopyObject.

A PUT is refused on its announced size before its body is read (``EntityTooLarge``), reserves
its bytes against the user's quota, and streams the verified body into the store, which keeps
nothing when the body turns out bad (the reservation is given back). A GET streams the object.
"""

from __future__ import annotations

import re
from datetime import datetime
from email.utils import parsedate_to_datetime
from urllib.parse import unquote

from django.conf import settings
from django.http import HttpResponse, HttpResponseBase

from ..base import InvalidRange, NoSuchKey, ObjectInfo
from ..limits import check_object_size, quota_bytes, quota_reserve, usage_forget
from ..presign import CONTENT_TYPE_PARAM
from .auth import authorize_key
from .errors import S3Error, invalid_argument, no_such_bucket, not_implemented
from .http import (
    Ctx,
    empty_response,
    object_headers,
    quote_etag,
    response_overrides,
    streaming_response,
    user_metadata,
    xml_response,
)
from .xml import add_all, element, timestamp

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def replaced_size(ctx: Ctx, key: str) -> int:
    """The size of the object a write replaces (0 if none), when a quota needs it."""
    if ctx.user_id is None or quota_bytes() <= 0:
        return 0
    try:
        return ctx.store.head(key).size
    except NoSuchKey:
        return 0


def checksum_headers(reader: object) -> dict[str, str]:
    checksum = getattr(reader, "checksum", None)
    return {checksum[0]: checksum[1]} if checksum else {}


def put_object(ctx: Ctx) -> HttpResponseBase:
    key = authorize_key(ctx.caller.principal, ctx.req.key or "")
    reader = ctx.body()
    size = reader.length  # type: ignore[attr-defined]
    if size is None:
        raise S3Error("MissingContentLength", "You must provide the Content-Length HTTP header.",
                      411)
    check_object_size(size)
    metadata = user_metadata(ctx.req.headers)
    content_type = ctx.req.headers.get("content-type") or None
    if ctx.caller.principal.kind == "service" and CONTENT_TYPE_PARAM in ctx.req.query:
        content_type = ctx.req.query[CONTENT_TYPE_PARAM]
    reservation = quota_reserve(ctx.store, user_id=ctx.user_id, prefix=ctx.prefix,
                                delta=size - replaced_size(ctx, key))
    try:
        info = ctx.store.put(key, reader, length=size, content_type=content_type,
                             metadata=metadata)
    except BaseException:
        reservation.release()
        raise
    return empty_response(200, {"ETag": quote_etag(info.etag), **checksum_headers(reader)})


# --- reads -----------------------------------------------------------------------------------


def _http_time(value: str) -> datetime | None:
    try:
        return parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None


def _etag_matches(header: str, etag: str) -> bool:
    tags = [t.strip().removeprefix("W/").strip('"') for t in header.split(",")]
    return "*" in tags or etag in tags


def precondition(headers: dict[str, str], info: ObjectInfo, *, prefix: str = "",
                 copy: bool = False) -> int | None:
    """The status S3 answers for the conditional headers (``if-*``, or for a copy source
    ``x-amz-copy-source-if-*``): 412, 304, or None to go on. A copy fails with 412 only."""
    def get(name: str) -> str | None:
        return headers.get(prefix + name)

    modified = info.last_modified.replace(microsecond=0)
    if_match, if_none_match = get("if-match"), get("if-none-match")
    if if_match is not None and not _etag_matches(if_match, info.etag):
        return 412
    if if_match is None and (since := _http_time(get("if-unmodified-since") or "")):
        if modified > since:
            return 412
    if if_none_match is not None and _etag_matches(if_none_match, info.etag):
        return 412 if copy else 304
    if if_none_match is None and (since := _http_time(get("if-modified-since") or "")):
        if modified <= since:
            return 412 if copy else 304
    return None


def _precondition_response(status: int, info: ObjectInfo) -> HttpResponse:
    if status == 304:
        return empty_response(304, {"ETag": quote_etag(info.etag),
                                    "Last-Modified": object_headers(info)["Last-Modified"]})
    raise S3Error("PreconditionFailed",
                  "At least one of the pre-conditions you specified did not hold", 412,
                  detail={"Condition": "If-Match"})


def parse_range(value: str | None) -> tuple[int | None, int | None] | None:
    """An HTTP Range S3 honours: ``bytes=a-b``, ``bytes=a-`` or ``bytes=-n``; anything else
    (several ranges, nonsense) is ignored and the whole object is sent, as S3 does."""
    match = _RANGE.match(value.strip()) if value else None
    if not match or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":
        if int(last) == 0:
            raise InvalidRange("The requested range is not satisfiable")
        return None, int(last)
    start, end = int(first), (int(last) if last else None)
    if end is not None and end < start:
        return None
    return start, end


def get_object(ctx: Ctx) -> HttpResponseBase:
    key = authorize_key(ctx.caller.principal, ctx.req.key or "")
    overrides = response_overrides(ctx.req.query)
    wanted = parse_range(ctx.req.headers.get("range"))
    if any(name in ctx.req.headers for name in
           ("if-match", "if-none-match", "if-modified-since", "if-unmodified-since")):
        info = ctx.store.head(key)
        if (status := precondition(ctx.req.headers, info)) is not None:
            return _precondition_response(status, info)
    if wanted is None:
        body = ctx.store.get(key)
    else:
        body = ctx.store.get(key, start=wanted[0], end=wanted[1])
    headers = {**object_headers(body.info), "Content-Length": str(body.length), **overrides}
    if wanted is None:
        return streaming_response(body, status=200, headers=headers)
    last = body.start + body.length - 1
    headers["Content-Range"] = f"bytes {body.start}-{last}/{body.info.size}"
    return streaming_response(body, status=206, headers=headers)


def head_object(ctx: Ctx) -> HttpResponseBase:
    key = authorize_key(ctx.caller.principal, ctx.req.key or "")
    info = ctx.store.head(key)
    if (status := precondition(ctx.req.headers, info)) is not None:
        return _precondition_response(status, info)
    response = empty_response(200, object_headers(info))
    response["Content-Length"] = str(info.size)  # of the object, as for a GET
    return response


def delete_object(ctx: Ctx) -> HttpResponseBase:
    key = authorize_key(ctx.caller.principal, ctx.req.key or "")
    ctx.store.delete(key)
    usage_forget(ctx.user_id)
    return empty_response(204)


# --- copy ------------------------------------------------------------------------------------


def copy_source(value: str) -> tuple[str, str]:
    """``x-amz-copy-source`` (``bucket/key``, URL-encoded, maybe with a leading ``/`` and a
    ``?versionId=``) as (bucket, key)."""
    path, _, version = value.partition("?")
    if version and version not in ("versionId=null", "versionId="):
        raise not_implemented("copying a version")
    try:
        path = unquote(path, errors="strict")
    except UnicodeDecodeError:
        raise invalid_argument("Invalid copy source encoding", name="x-amz-copy-source",
                               value=value) from None
    bucket, _, key = path.lstrip("/").partition("/")
    if not bucket or not key:
        raise invalid_argument("Copy Source must mention the source bucket and key: "
                               "sourcebucket/sourcekey", name="x-amz-copy-source", value=value)
    return bucket, key


def copy_object(ctx: Ctx) -> HttpResponseBase:
    principal = ctx.caller.principal
    dest = authorize_key(principal, ctx.req.key or "")
    bucket, source = copy_source(ctx.req.headers["x-amz-copy-source"])
    if bucket != settings.RTC_S3_BUCKET:
        raise no_such_bucket(bucket)
    authorize_key(principal, source)
    directive = ctx.req.headers.get("x-amz-metadata-directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE"):
        raise invalid_argument("Unknown metadata directive.", name="x-amz-metadata-directive",
                               value=directive)
    if source == dest and directive == "COPY":
        raise S3Error("InvalidRequest",
                      "This copy request is illegal because it is trying to copy an object to "
                      "itself without changing the object's metadata, storage class, website "
                      "redirect location or encryption attributes.", 400)
    info = ctx.store.head(source)
    if precondition(ctx.req.headers, info, prefix="x-amz-copy-source-", copy=True) is not None:
        raise S3Error("PreconditionFailed",
                      "At least one of the pre-conditions you specified did not hold", 412)
    check_object_size(info.size)
    metadata = content_type = None
    if directive == "REPLACE":
        metadata = user_metadata(ctx.req.headers)
        content_type = ctx.req.headers.get("content-type") or None
    reservation = quota_reserve(ctx.store, user_id=ctx.user_id, prefix=ctx.prefix,
                                delta=info.size - replaced_size(ctx, dest))
    try:
        copied = ctx.store.copy(source, dest, metadata=metadata, content_type=content_type)
    except BaseException:
        reservation.release()
        raise
    root = element("CopyObjectResult")
    add_all(root, {"LastModified": timestamp(copied.last_modified),
                   "ETag": quote_etag(copied.etag)})
    return xml_response(root)
