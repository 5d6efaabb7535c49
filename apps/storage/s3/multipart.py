"""Multipart uploads: Create, UploadPart, Complete, Abort, ListParts.

Limits as S3: part numbers 1..10000, parts at most 5 GiB, every part but the last at least
5 MiB (checked at complete). The object a complete would make is also held to
``S3_MAX_OBJECT_BYTES`` early, at each part (the parts so far and this one), and again at
complete; parts count against the quota only once they form an object, but a part that could
not fit is refused at once.
"""

from __future__ import annotations

from django.http import HttpResponseBase

from ..base import InvalidPart, InvalidPartOrder
from ..limits import MAX_PARTS, check_part, check_parts, quota_check, quota_reserve
from .auth import authorize_key
from .errors import S3Error, invalid_argument, malformed_xml
from .http import Ctx, empty_response, quote_etag, user_metadata, xml_response
from .objects import checksum_headers, replaced_size
from .xml import add, add_all, children, element, parse, text_of, timestamp

MAX_COMPLETE_BODY = 4 * 1024 * 1024  # 10000 parts with checksums fit in well under this


def _upload_id(ctx: Ctx) -> str:
    upload_id = ctx.req.query.get("uploadId", "")
    if not upload_id:
        raise S3Error("NoSuchUpload", "The specified upload does not exist.", 404)
    return upload_id


def _part_number(raw: str | None) -> int:
    try:
        number = int(raw or "")
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_PARTS:
        raise invalid_argument(f"Part number must be an integer between 1 and {MAX_PARTS}, "
                               "inclusive", name="partNumber", value=raw or "")
    return number


def create_multipart(ctx: Ctx) -> HttpResponseBase:
    key = authorize_key(ctx.caller.principal, ctx.req.key or "")
    upload_id = ctx.store.create_multipart(
        key, content_type=ctx.req.headers.get("content-type") or None,
        metadata=user_metadata(ctx.req.headers),
    )
    root = element("InitiateMultipartUploadResult")
    add_all(root, {"Bucket": ctx.req.bucket, "Key": key, "UploadId": upload_id})
    response = xml_response(root)
    if algorithm := ctx.req.headers.get("x-amz-checksum-algorithm"):
        response["x-amz-checksum-algorithm"] = algorithm
    return response


def upload_part(ctx: Ctx) -> HttpResponseBase:
    key = authorize_key(ctx.caller.principal, ctx.req.key or "")
    number = _part_number(ctx.req.query.get("partNumber"))
    upload_id = _upload_id(ctx)
    reader = ctx.body()
    size = reader.length  # type: ignore[attr-defined]
    if size is None:
        raise S3Error("MissingContentLength", "You must provide the Content-Length HTTP header.",
                      411)
    uploaded = sum(p.size for p in ctx.store.list_parts(key, upload_id)
                   if p.part_number != number)
    check_part(number, size, uploaded=uploaded)
    quota_check(ctx.store, user_id=ctx.user_id, prefix=ctx.prefix,
                more=uploaded + size - replaced_size(ctx, key))
    etag = ctx.store.upload_part(key, upload_id, number, reader, length=size)
    return empty_response(200, {"ETag": quote_etag(etag), **checksum_headers(reader)})


def _named_parts(body: bytes) -> list[tuple[int, str]]:
    root = parse(body, "CompleteMultipartUpload")
    parts = []
    for node in children(root, "Part"):
        number, etag = text_of(node, "PartNumber"), text_of(node, "ETag")
        if number is None or etag is None:
            raise malformed_xml()
        parts.append((_part_number(number.strip()), etag.strip().strip('"')))
    if not parts:
        raise malformed_xml()
    numbers = [n for n, _ in parts]
    if numbers != sorted(numbers) or len(set(numbers)) != len(numbers):
        raise InvalidPartOrder("The list of parts was not in ascending order. Parts must be "
                               "ordered by part number.")
    return parts


def complete_multipart(ctx: Ctx) -> HttpResponseBase:
    key = authorize_key(ctx.caller.principal, ctx.req.key or "")
    upload_id = _upload_id(ctx)
    parts = _named_parts(ctx.small_body(MAX_COMPLETE_BODY))
    stored = {p.part_number: p for p in ctx.store.list_parts(key, upload_id)}
    sizes = []
    for number, etag in parts:
        part = stored.get(number)
        if part is None or part.etag.strip('"') != etag:
            raise InvalidPart("One or more of the specified parts could not be found. The part "
                              "may not have been uploaded, or the specified entity tag may not "
                              "match the part's entity tag.")
        sizes.append(part.size)
    total = check_parts(sizes)
    reservation = quota_reserve(ctx.store, user_id=ctx.user_id, prefix=ctx.prefix,
                                delta=total - replaced_size(ctx, key))
    try:
        info = ctx.store.complete_multipart(key, upload_id, parts)
    except BaseException:
        reservation.release()
        raise
    root = element("CompleteMultipartUploadResult")
    add_all(root, {"Location": ctx.http.build_absolute_uri(ctx.req.raw_path),
                   "Bucket": ctx.req.bucket, "Key": key, "ETag": quote_etag(info.etag)})
    return xml_response(root)


def abort_multipart(ctx: Ctx) -> HttpResponseBase:
    key = authorize_key(ctx.caller.principal, ctx.req.key or "")
    ctx.store.abort_multipart(key, _upload_id(ctx))
    return empty_response(204)


def list_parts(ctx: Ctx) -> HttpResponseBase:
    key = authorize_key(ctx.caller.principal, ctx.req.key or "")
    upload_id = _upload_id(ctx)
    query = ctx.req.query
    try:
        max_parts = int(query.get("max-parts", "1000"))
        marker = int(query.get("part-number-marker", "0") or "0")
    except ValueError:
        raise invalid_argument("max-parts and part-number-marker must be integers") from None
    if max_parts < 0 or marker < 0:
        raise invalid_argument("max-parts and part-number-marker may not be negative")
    max_parts = min(max_parts, 1000)
    after = [p for p in ctx.store.list_parts(key, upload_id) if p.part_number > marker]
    page, truncated = after[:max_parts], len(after) > max_parts
    root = element("ListPartsResult")
    add_all(root, {"Bucket": ctx.req.bucket, "Key": key, "UploadId": upload_id,
                   "PartNumberMarker": marker,
                   "NextPartNumberMarker": page[-1].part_number if page else marker,
                   "MaxParts": max_parts, "IsTruncated": truncated,
                   "StorageClass": "STANDARD"})
    for part in page:
        node = add(root, "Part")
        add_all(node, {"PartNumber": part.part_number,
                       "LastModified": timestamp(part.last_modified),
                       "ETag": quote_etag(part.etag), "Size": part.size})
    return xml_response(root)
