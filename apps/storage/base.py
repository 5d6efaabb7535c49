"""The object-store interface every backend implements (S3 on boto3, a local folder).

The rest of the project speaks only this interface: the ``/s3/`` endpoint, the attachment
pipeline and the health probe never know which backend is configured. Keys are opaque strings
that the callers have already confined to a user's prefix; a backend still refuses a key that
could escape its root (``InvalidKey``). Bodies go in as file-like objects or bytes and come out
as iterators of chunks, so no whole object needs to sit in memory.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO

CHUNK_SIZE = 256 * 1024


class StoreError(Exception):
    """Base of the errors a backend raises; each maps to one S3 error code."""

    code = "InternalError"
    status = 500


class NoSuchKey(StoreError):
    code = "NoSuchKey"
    status = 404


class NoSuchUpload(StoreError):
    code = "NoSuchUpload"
    status = 404


class InvalidPart(StoreError):
    """A part named in a complete call is missing or its ETag differs."""

    code = "InvalidPart"
    status = 400


class InvalidPartOrder(StoreError):
    code = "InvalidPartOrder"
    status = 400


class InvalidRange(StoreError):
    code = "InvalidRange"
    status = 416


class InvalidArgument(StoreError):
    """An argument no backend accepts (a part number, a continuation token, metadata)."""

    code = "InvalidArgument"
    status = 400


class InvalidKey(InvalidArgument):
    """A key no backend may store (empty, too long, NUL, a path that leaves the root)."""


class EntityTooSmall(StoreError):
    """A multipart part other than the last is under 5 MiB (S3's minimum)."""

    code = "EntityTooSmall"
    status = 400


class IncompleteBody(StoreError):
    """The body ended before the ``length`` the caller announced."""

    code = "IncompleteBody"
    status = 400


class BadDigest(StoreError):
    """The body does not match the Content-MD5 the caller gave."""

    code = "BadDigest"
    status = 400


class StoreUnavailable(StoreError):
    """The backend did not answer (network, credentials, bucket missing)."""

    code = "ServiceUnavailable"
    status = 503


MAX_KEY_BYTES = 1024


def check_key(key: str) -> str:
    """``key`` if every backend may store it, else ``InvalidKey``: not empty, at most 1024 UTF-8
    bytes, no leading ``/``, no ``..`` segment, no backslash, no NUL or other control character.
    The same rule on every backend, so switching backends never strands a key."""
    if not isinstance(key, str) or not key:
        raise InvalidKey("the key is empty")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidKey("the key is not valid Unicode") from None
    if size > MAX_KEY_BYTES:
        raise InvalidKey(f"the key is longer than {MAX_KEY_BYTES} bytes")
    if key.startswith("/"):
        raise InvalidKey("the key starts with /")
    if "\\" in key:
        raise InvalidKey("the key contains a backslash")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in key):
        raise InvalidKey("the key contains a control character")
    if ".." in key.split("/"):
        raise InvalidKey("the key contains a .. segment")
    return key


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str  # quoted-free hex MD5, or "<md5-of-md5s>-<parts>" for multipart objects
    last_modified: datetime
    content_type: str = "application/octet-stream"
    metadata: dict[str, str] = field(default_factory=dict)  # x-amz-meta-* without the prefix


@dataclass(frozen=True)
class ObjectBody:
    """An open object (or a range of it): ``info`` describes the whole object, ``start`` and
    ``length`` the bytes ``chunks`` yields. Iterate or call ``close`` to release the backend's
    handle."""

    info: ObjectInfo
    start: int
    length: int
    chunks: Iterator[bytes]

    def read(self) -> bytes:
        """The whole body in memory: for small objects only (thumbnails, tests)."""
        return b"".join(self.chunks)

    def close(self) -> None:
        close = getattr(self.chunks, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True)
class ListPage:
    objects: list[ObjectInfo]
    common_prefixes: list[str]
    is_truncated: bool
    next_token: str | None  # pass back as ``continuation_token`` for the next page


@dataclass(frozen=True)
class PartInfo:
    part_number: int
    etag: str
    size: int
    last_modified: datetime


@dataclass(frozen=True)
class DeleteFailure:
    key: str
    code: str
    message: str


class ObjectStore(abc.ABC):
    """One bucket's worth of objects. Thread-safe; one instance per process (``get_store``)."""

    name: str = "abstract"

    # --- objects ---------------------------------------------------------------------------
    @abc.abstractmethod
    def put(
        self,
        key: str,
        body: BinaryIO | bytes,
        *,
        length: int | None = None,
        content_type: str | None = None,
        metadata: dict[str, str] | None = None,
        content_md5: str | None = None,  # base64, as the Content-MD5 header
    ) -> ObjectInfo:
        """Store ``body`` (read to its end, or ``length`` bytes) under ``key``, replacing any
        object there. The object appears whole or not at all."""

    @abc.abstractmethod
    def get(self, key: str, *, start: int | None = None, end: int | None = None) -> ObjectBody:
        """The object, or bytes ``start``..``end`` inclusive (either may be None, as in an
        HTTP Range: ``start=None, end=N`` is the last N bytes). ``InvalidRange`` when the
        range starts past the end."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo: ...

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; deleting a missing key is not an error (as in S3)."""

    @abc.abstractmethod
    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        """Remove each key; returns the ones that failed (missing keys do not fail)."""

    @abc.abstractmethod
    def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        max_keys: int = 1000,
        continuation_token: str | None = None,
        start_after: str | None = None,
    ) -> ListPage:
        """Keys under ``prefix`` in UTF-8 binary order, as ListObjectsV2."""

    @abc.abstractmethod
    def copy(
        self,
        source_key: str,
        dest_key: str,
        *,
        metadata: dict[str, str] | None = None,
        content_type: str | None = None,
    ) -> ObjectInfo:
        """Copy within the store; ``metadata``/``content_type`` given replace the source's."""

    # --- multipart -------------------------------------------------------------------------
    @abc.abstractmethod
    def create_multipart(
        self, key: str, *, content_type: str | None = None, metadata: dict[str, str] | None = None
    ) -> str:
        """Start an upload; returns its upload id."""

    @abc.abstractmethod
    def upload_part(
        self, key: str, upload_id: str, part_number: int, body: BinaryIO | bytes,
        *, length: int | None = None,
    ) -> str:
        """Store part ``part_number`` (1..10000); returns its ETag (hex MD5)."""

    @abc.abstractmethod
    def complete_multipart(
        self, key: str, upload_id: str, parts: list[tuple[int, str]]
    ) -> ObjectInfo:
        """Join the named parts (ascending numbers, matching ETags) into the object."""

    @abc.abstractmethod
    def abort_multipart(self, key: str, upload_id: str) -> None: ...

    @abc.abstractmethod
    def list_parts(self, key: str, upload_id: str) -> list[PartInfo]: ...

    # --- URLs and lifecycle ----------------------------------------------------------------
    @abc.abstractmethod
    def presign_get(self, key: str, *, expires_in: int) -> str:
        """A URL anyone may GET for ``expires_in`` seconds."""

    @abc.abstractmethod
    def presign_put(
        self, key: str, *, expires_in: int, content_type: str | None = None
    ) -> str:
        """A URL anyone may PUT the object to for ``expires_in`` seconds."""

    @abc.abstractmethod
    def health(self) -> None:
        """Return when the store answers; raise ``StoreUnavailable`` otherwise."""

    def close(self) -> None:  # noqa: B027 - optional for backends holding nothing
        """Release connections and handles."""
