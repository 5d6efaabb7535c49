"""The local store's files: how a key becomes path names, the object file format (body, then
a JSON trailer), and the ordered walk that listings are made of. ``local.py`` describes the
layout; this module is its mechanics, free of any store state."""

from __future__ import annotations

import base64
import errno
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from ..base import CHUNK_SIZE, InvalidArgument, ListPage, ObjectInfo, StoreError
from .common import DEFAULT_CONTENT_TYPE

log = logging.getLogger(__name__)

SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")
PIECE = 240  # bytes of encoded segment per file name (255 at most on ext4, xfs, btrfs, apfs)
OBJECT, DIR, LONG = ".o", ".d", ".l"
MAGIC = b"RTO1"
MAX_LIST = 1000  # keys per page, as S3
_HEX2 = re.compile(r"[0-9A-F]{2}\Z")


def _encode_chars(segment: str) -> list[str]:
    out: list[str] = []
    for c in segment:
        if c in SAFE:
            out.append(c)
        elif "A" <= c <= "Z":
            out.append("^" + c.lower())
        else:
            out.append("".join(f"%{b:02X}" for b in c.encode("utf-8")))
    return out


def segment_names(segment: str, tag: str) -> list[str]:
    """The file names one key segment takes: ``[piece.l, ..., last<tag>]``. Splitting is greedy
    on character boundaries, so segments sharing a beginning share their first pieces."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for encoded in _encode_chars(segment):
        if size + len(encoded) > PIECE:
            pieces.append("".join(current))
            current, size = [], 0
        current.append(encoded)
        size += len(encoded)
    pieces.append("".join(current))
    return [p + LONG for p in pieces[:-1]] + [pieces[-1] + tag]


def decode_name(name: str) -> str:
    """The segment text of an encoded name (without its tag); ``ValueError`` if not ours."""
    out = bytearray()
    i = 0
    while i < len(name):
        c = name[i]
        if c == "%" and _HEX2.match(name[i + 1 : i + 3]):
            out += bytes.fromhex(name[i + 1 : i + 3])
            i += 3
        elif c == "^" and name[i + 1 : i + 2] in SAFE and name[i + 1 : i + 2].isalpha():
            out += name[i + 1].upper().encode()
            i += 2
        elif c in SAFE:
            out += c.encode()
            i += 1
        else:
            raise ValueError(name)
    return out.decode("utf-8")


def trailer(meta: dict[str, Any]) -> bytes:
    raw = json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode()
    return raw + len(raw).to_bytes(4, "big") + MAGIC


def read_trailer(fd: int) -> tuple[int, dict[str, Any]]:
    """(body size, trailer) of an open object or part file."""
    end = os.fstat(fd).st_size
    tail = os.pread(fd, 8, end - 8) if end >= 8 else b""
    if len(tail) != 8 or tail[4:] != MAGIC:
        raise StoreError("an object file is damaged (no trailer)")
    n = int.from_bytes(tail[:4], "big")
    if n > end - 8:
        raise StoreError("an object file is damaged (bad trailer length)")
    try:
        meta = json.loads(os.pread(fd, n, end - 8 - n))
    except ValueError:
        raise StoreError("an object file is damaged (bad trailer)") from None
    return end - 8 - n, meta


def timestamp(meta: dict[str, Any]) -> datetime:
    return datetime.fromtimestamp(float(meta["mtime"]), UTC)


class FileChunks(Iterator[bytes]):
    """Bytes ``start``..``start+length`` of an open file, ``CHUNK_SIZE`` at a time; closes the
    file at the end or on ``close`` (a generator would not run its ``finally`` if never
    started)."""

    def __init__(self, file: IO[bytes], start: int, length: int) -> None:
        self._file: IO[bytes] | None = file
        self._pos = start
        self._left = length

    def __next__(self) -> bytes:
        if self._file is None:
            raise StopIteration
        if self._left <= 0:
            self.close()
            raise StopIteration
        chunk = os.pread(self._file.fileno(), min(CHUNK_SIZE, self._left), self._pos)
        if not chunk:  # cannot happen: a replaced file keeps its inode and size
            self.close()
            raise StoreError("an object file ended early")
        self._pos += len(chunk)
        self._left -= len(chunk)
        return chunk

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass(frozen=True)
class Entry:
    name: str  # the decoded segment
    is_dir: bool
    path: str

    @property
    def order(self) -> bytes:
        # Keys under directory d all start with "d/": sorting entries by that (and files by
        # their name) makes a depth-first walk yield keys in UTF-8 binary order.
        return (self.name + "/" if self.is_dir else self.name).encode()


def pump(fd: int, size: int, write: Callable[[bytes], object]) -> None:
    """Copy the first ``size`` bytes of an open file to ``write``."""
    pos = 0
    while pos < size:
        chunk = os.pread(fd, min(CHUNK_SIZE, size - pos), pos)
        if not chunk:
            raise StoreError("an object file ended early")
        write(chunk)
        pos += len(chunk)


def info_of(key: str, size: int, meta: dict[str, Any]) -> ObjectInfo:
    return ObjectInfo(
        key=key,
        size=size,
        etag=meta["etag"],
        last_modified=timestamp(meta),
        content_type=meta.get("content_type") or DEFAULT_CONTENT_TYPE,
        metadata=dict(meta.get("metadata") or {}),
    )


def entries(directory: str, name_prefix: str = "") -> list[Entry]:
    """The objects and directories in ``directory`` in walk order, long segments' ``.l``
    pieces read through."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return []
        raise
    out: list[Entry] = []
    for name in names:
        tag = name[-2:]
        if tag not in (OBJECT, DIR, LONG):
            continue
        try:
            segment = name_prefix + decode_name(name[:-2])
        except ValueError:
            continue  # not a name this store writes
        path = os.path.join(directory, name)
        if tag == LONG:
            out += entries(path, segment)  # the rest of a long segment's name
        else:
            out.append(Entry(segment, tag == DIR, path))
    if not name_prefix:
        out.sort(key=lambda e: e.order)
    return out


def walk(
    directory: str, base: str, prefix: str, lower: bytes, skip: bool, rollup: bool
) -> Iterator[tuple[str, str, ObjectInfo | None]]:
    """Keys under ``directory`` (whose keys start with ``base``) that start with ``prefix``
    and come after ``lower`` (and, with ``skip``, do not start with it), in order. With
    ``rollup`` a directory below the prefix is yielded as one common prefix."""
    for entry in entries(directory):
        full = base + entry.name
        if entry.is_dir:
            full += "/"
            if not (full.startswith(prefix) or prefix.startswith(full)):
                continue
            order = full.encode()
            if (skip and order.startswith(lower)) or (
                order < lower and not lower.startswith(order)
            ):
                continue  # every key below sorts before the start point
            if rollup and len(full) > len(prefix):
                if next(walk(entry.path, full, "", lower, skip, False), None):
                    yield "cp", full, None
                continue
            yield from walk(entry.path, full, prefix, lower, skip, rollup)
            continue
        order = full.encode()
        if not full.startswith(prefix) or order <= lower or (skip and order.startswith(lower)):
            continue
        try:
            with open(entry.path, "rb", buffering=0) as f:
                size, meta = read_trailer(f.fileno())
        except FileNotFoundError:
            continue  # deleted while we walked
        except StoreError:
            log.warning("object store: skipping a damaged file in the listing")
            continue
        # As in S3's listings: no content type, no user metadata.
        yield "key", full, ObjectInfo(full, size, meta["etag"], timestamp(meta))


def _token(value: str, is_prefix: bool) -> str:
    """A continuation token: where the page stopped, and whether that was a common prefix
    (whose keys the next page skips)."""
    return base64.urlsafe_b64encode((b"p" if is_prefix else b"k") + value.encode()).decode()


def _untoken(token: str) -> tuple[bytes, bool]:
    try:
        raw = base64.urlsafe_b64decode(token.encode())
    except ValueError:
        raw = b""
    if raw[:1] not in (b"k", b"p"):
        raise InvalidArgument("the continuation token is not valid")
    return raw[1:], raw[:1] == b"p"


def list_page(
    directory: str,
    base: str,
    prefix: str,
    *,
    delimiter: str | None,
    max_keys: int,
    continuation_token: str | None,
    start_after: str | None,
) -> ListPage:
    """One ListObjectsV2 page of the keys under ``directory`` (the folder of ``base``, the
    prefix's complete segments). Common prefixes count against ``max_keys``, as in S3."""
    if continuation_token:
        lower, skip = _untoken(continuation_token)
    else:
        lower, skip = (start_after or "").encode(), False
    max_keys = max(0, min(int(max_keys), MAX_LIST))
    objects: list[ObjectInfo] = []
    prefixes: list[str] = []
    last: tuple[str, bool] | None = None
    truncated = False
    if max_keys == 0:
        return ListPage([], [], False, None)
    for kind, key, info in walk(directory, base, prefix, lower, skip, delimiter == "/"):
        common = key if kind == "cp" else None
        if common is None and delimiter:
            cut = key.find(delimiter, len(prefix))
            if cut >= 0:
                common = key[: cut + len(delimiter)]
        if common is not None and last == (common, True):
            continue  # more keys under the common prefix just returned
        if len(objects) + len(prefixes) == max_keys:
            truncated = True
            break
        if common is not None:
            prefixes.append(common)
            last = (common, True)
        else:
            assert info is not None
            objects.append(info)
            last = (key, False)
    token = _token(*last) if truncated and last else None
    return ListPage(objects, prefixes, truncated, token)
