"""What every operation shares: its context, S3's response shapes, object headers, and the
request body read through SigV4's verifying reader (never ``request.body``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils.http import http_date

from .. import sigv4
from ..base import ObjectBody, ObjectInfo, ObjectStore
from .auth import Caller
from .errors import S3Error
from .request import S3Request
from .xml import ET, error_body, to_bytes

log = logging.getLogger(__name__)

XML = "application/xml"
META_PREFIX = "x-amz-meta-"
MAX_METADATA_BYTES = 2048  # S3: user metadata, names and values together
_RESPONSE_OVERRIDES = {
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}


@dataclass(frozen=True)
class Ctx:
    req: S3Request
    caller: Caller
    store: ObjectStore
    http: HttpRequest  # its stream is the body, read only through ``body``
    now: datetime

    @property
    def user_id(self) -> int | None:
        return self.caller.principal.user_id

    @property
    def prefix(self) -> str | None:
        return self.caller.principal.prefix

    def body(self) -> BinaryIO:
        """The verified, decoded request body (a reader that raises on a bad signature,
        checksum or length by the time it hands out its last bytes)."""
        # Under ASGI the stream is the whole body Daphne received (de-chunked when it came
        # with Transfer-Encoding: chunked, as boto3 sends aws-chunked bodies over HTTPS).
        return sigv4.body_reader(self.caller.signed, self.http, headers=self.req.headers,
                                 signing_key=self.caller.signing_key)

    def small_body(self, limit: int) -> bytes:
        """A whole small body (an XML request), at most ``limit`` bytes."""
        reader = self.body()
        declared = getattr(reader, "length", None)
        if declared is not None and declared > limit:
            raise _too_big(limit)
        data = bytearray()
        while chunk := reader.read(64 * 1024):
            data += chunk
            if len(data) > limit:
                raise _too_big(limit)
        return bytes(data)


def _too_big(limit: int) -> S3Error:
    return S3Error("MaxMessageLengthExceeded",
                   f"Your request was too big: at most {limit} bytes here.", 400)


# --- responses -------------------------------------------------------------------------------


def xml_response(root: ET.Element, status: int = 200) -> HttpResponse:
    return HttpResponse(to_bytes(root), status=status, content_type=XML)


def empty_response(status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    response = HttpResponse(b"", status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    response["Content-Length"] = "0"
    return response


def error_response(err: S3Error, *, resource: str, request_id: str,
                   head: bool) -> HttpResponse:
    """S3's XML error; a HEAD gets the status alone, as from S3."""
    if head:
        return empty_response(err.status)
    body = error_body(err.code, err.message, resource=resource, request_id=request_id,
                      detail=err.detail)
    return HttpResponse(body, status=err.status, content_type=XML)


def quote_etag(etag: str) -> str:
    return f'"{etag}"'


def object_headers(info: ObjectInfo) -> dict[str, str]:
    headers = {
        "Content-Type": info.content_type or "binary/octet-stream",
        "ETag": quote_etag(info.etag),
        "Last-Modified": http_date(info.last_modified.timestamp()),
        "Accept-Ranges": "bytes",
    }
    for name, value in info.metadata.items():
        headers[META_PREFIX + name] = value
    return headers


def response_overrides(query: dict[str, str]) -> dict[str, str]:
    """``response-content-type`` and its kin: headers a (presigned) GET asks to be answered
    with."""
    overrides = {header: query[param] for param, header in _RESPONSE_OVERRIDES.items()
                 if param in query}
    for value in overrides.values():
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise S3Error("InvalidArgument", "A response-* header override contains a control "
                          "character.", 400)
    return overrides


def user_metadata(headers: dict[str, str]) -> dict[str, str]:
    metadata = {name[len(META_PREFIX):]: value for name, value in headers.items()
                if name.startswith(META_PREFIX)}
    size = sum(len(k.encode()) + len(v.encode("utf-8", "replace")) for k, v in metadata.items())
    if size > MAX_METADATA_BYTES:
        raise S3Error("MetadataTooLarge", f"Your metadata headers exceed the maximum allowed "
                      f"metadata size of {MAX_METADATA_BYTES} bytes.", 400)
    return metadata


def _next_chunk(chunks: Any) -> bytes | None:
    return next(chunks, None)


async def _stream(body: ObjectBody) -> AsyncIterator[bytes]:
    """The object's chunks for Django's ASGI handler. An async iterator on purpose: Django
    would read a synchronous one into a list, the whole object in memory. Each chunk is read
    on a pool thread, so the event loop never waits on the store."""
    chunks = iter(body.chunks)
    pull = sync_to_async(_next_chunk, thread_sensitive=False)
    try:
        while (chunk := await pull(chunks)) is not None:
            if chunk:
                yield chunk
    finally:
        try:
            body.close()
        except Exception:  # the client left; a close failing must not hide that
            log.debug("closing an object body failed", exc_info=True)


def streaming_response(body: ObjectBody, *, status: int,
                       headers: dict[str, str]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(_stream(body), status=status)
    for name, value in headers.items():
        response[name] = value
    return response
