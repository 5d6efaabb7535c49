"""What both backends do the same way: reading bodies in chunks with their MD5, ranges, ETags
and the checks of a multipart completion. Kept here so the two backends cannot drift apart on
the rules the contract tests pin."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from ..base import (
    CHUNK_SIZE,
    BadDigest,
    IncompleteBody,
    InvalidArgument,
    InvalidPart,
    InvalidPartOrder,
    InvalidRange,
)

MIN_PART_SIZE = 5 * 1024 * 1024  # S3: every part but the last
MAX_PART_NUMBER = 10000
DEFAULT_CONTENT_TYPE = "application/octet-stream"


def iter_body(body: BinaryIO | bytes, length: int | None) -> Iterator[bytes]:
    """``body`` in chunks of at most ``CHUNK_SIZE``: to its end, or exactly ``length`` bytes
    (``IncompleteBody`` if it ends sooner). Whatever the body's reader raises propagates."""
    if isinstance(body, bytes | bytearray | memoryview):
        view = memoryview(body)
        if length is not None:
            if len(view) < length:
                raise IncompleteBody(f"the body has {len(view)} bytes, not {length}")
            view = view[:length]
        for i in range(0, len(view), CHUNK_SIZE):
            yield bytes(view[i : i + CHUNK_SIZE])
        return
    remaining = length
    while remaining is None or remaining > 0:
        want = CHUNK_SIZE if remaining is None else min(CHUNK_SIZE, remaining)
        chunk = body.read(want)
        if not chunk:
            break
        if len(chunk) > want:
            raise ValueError("the body's read() returned more bytes than asked for")
        if remaining is not None:
            remaining -= len(chunk)
        yield chunk
    if remaining:
        raise IncompleteBody(f"the body ended {remaining} bytes before its length {length}")
    if length is not None:
        # Read on to the end: a verifying reader (the /s3/ endpoint's) checks the signature or
        # checksum only when it reaches EOF, and must get the chance to refuse the body.
        body.read(1)


def copy_body(
    body: BinaryIO | bytes,
    length: int | None,
    write: Callable[[bytes], object],
    content_md5: str | None = None,
) -> tuple[int, str]:
    """Feed ``body`` to ``write`` chunk by chunk; returns (size, hex MD5). ``BadDigest`` when
    ``content_md5`` (base64, as the Content-MD5 header) does not match."""
    expected = None
    if content_md5 is not None:
        try:
            expected = base64.b64decode(content_md5.strip(), validate=True)
        except (binascii.Error, ValueError):
            expected = b""
        if len(expected) != 16:
            raise BadDigest("Content-MD5 is not a base64-encoded MD5 digest")
    md5 = hashlib.md5(usedforsecurity=False)
    size = 0
    for chunk in iter_body(body, length):
        md5.update(chunk)
        size += len(chunk)
        write(chunk)
    if expected is not None and md5.digest() != expected:
        raise BadDigest("the body does not match its Content-MD5")
    return size, md5.hexdigest()


def check_range(start: int | None, end: int | None) -> None:
    """Refuse what no object size can satisfy: negative numbers, ``start > end``, ``bytes=-0``."""
    if start is None and end is None:
        return
    if start is None:
        if end is None or end <= 0:
            raise InvalidRange("a suffix range must ask for at least one byte")
        return
    if start < 0 or (end is not None and end < start):
        raise InvalidRange(f"bytes={start}-{'' if end is None else end} is not a valid range")


def resolve_range(size: int, start: int | None, end: int | None) -> tuple[int, int]:
    """(first byte, length) of the range in an object of ``size`` bytes, as S3 and HTTP do:
    ``end`` is clamped to the object, a suffix longer than the object is the whole object, and a
    range starting at or past the end is ``InvalidRange``."""
    check_range(start, end)
    if start is None and end is None:
        return 0, size
    if start is None:
        assert end is not None
        if size == 0:
            raise InvalidRange("the object is empty")
        n = min(end, size)
        return size - n, n
    if start >= size:
        raise InvalidRange(f"the range starts at {start}, the object has {size} bytes")
    last = size - 1 if end is None else min(end, size - 1)
    return start, last - start + 1


def normalize_etag(etag: str) -> str:
    """An ETag without its quotes (clients send them either way)."""
    return etag.strip().strip('"').lower()


def multipart_etag(part_etags: Iterable[str]) -> str:
    """S3's ETag of a multipart object: MD5 of the parts' binary MD5s, then ``-<parts>``."""
    digests = [bytes.fromhex(normalize_etag(e)) for e in part_etags]
    return f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"


def check_part_number(part_number: int) -> None:
    if not isinstance(part_number, int) or not 1 <= part_number <= MAX_PART_NUMBER:
        raise InvalidArgument(f"part number must be an integer from 1 to {MAX_PART_NUMBER}")


def check_completion(parts: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The parts of a complete call with normalised ETags; ``InvalidPartOrder`` unless their
    numbers strictly ascend (checked first, on both backends, so the error does not depend on
    which one answers)."""
    if not parts:
        raise InvalidPart("a multipart upload needs at least one part")
    out: list[tuple[int, str]] = []
    previous = 0
    for number, etag in parts:
        check_part_number(number)
        if number <= previous:
            raise InvalidPartOrder("the list of parts was not in ascending order")
        previous = number
        out.append((number, normalize_etag(etag)))
    return out


def clean_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    """User metadata as S3 keeps it: names lower-cased; ``InvalidArgument`` for anything but
    printable ASCII (S3 carries it in HTTP headers, so the local folder refuses it too)."""
    out: dict[str, str] = {}
    for name, value in (metadata or {}).items():
        name, value = str(name), str(value)
        if not name or not all(0x20 < ord(c) < 0x7F and c != ":" for c in name):
            raise InvalidArgument(f"metadata name {name!r} is not a printable ASCII token")
        if not all(0x20 <= ord(c) < 0x7F or c == "\t" for c in value):
            raise InvalidArgument(f"metadata {name!r}: the value is not printable ASCII")
        out[name.lower()] = value
    return out
