"""The object store in a local folder: the embedded default (``RTC_OBJECT_STORE["ROOT"]``).

Layout under ROOT::

    keys/      one file per object, in a tree that mirrors the key's ``/`` segments
    .uploads/  <upload id>/upload.json and <part number>.part, until complete or abort
               (or a week without a new part: removed when a store opens the folder)
    .tmp/      files being written; renamed into place when whole

A bucket holds ``a`` and ``a/b`` at once and keys may hold any character; a directory tree
cannot, so every segment is encoded and tagged with what it is:

- encoding: ``a-z 0-9 - _ .`` stay, an upper-case letter becomes ``^`` + its lower case, any
  other character is ``%XX`` per UTF-8 byte. Names are therefore plain ASCII, never ``.`` or
  ``..`` and never differ only in case, so the tree works on case-insensitive or
  Unicode-normalising file systems too.
- suffix: ``.o`` for an object (the key's last segment), ``.d`` for a directory (a segment
  followed by ``/``), so key ``a`` is ``keys/a.o`` and key ``a/b`` is ``keys/a.d/b.o``. A
  segment whose encoding is longer than 240 bytes (file names stop at 255) is split into
  pieces; all but the last are directories tagged ``.l`` that the listing reads through.

An object file is the body followed by a trailer: JSON (key, ETag, content type, user
metadata, modification time), its length as 4 big-endian bytes, then ``RTO1``. Body and
metadata are one file, so one ``os.replace`` publishes both: a writer builds the file in
``.tmp`` (fsynced) and renames it over the old one, readers keep the inode they opened, and a
body that raises while being read leaves the old object untouched. Directories emptied by a
delete are removed; a writer whose parent vanished under it retries.

Keys are checked with ``base.check_key`` before any path is built, and the encoding can only
produce names inside ``keys/``: no key reaches outside ROOT. Listing walks the tree in UTF-8
binary order of the decoded keys, descending only where the prefix and the start point allow.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import IO, Any, BinaryIO

from ..base import (
    DeleteFailure,
    EntityTooSmall,
    InvalidKey,
    InvalidPart,
    ListPage,
    NoSuchKey,
    NoSuchUpload,
    ObjectBody,
    ObjectInfo,
    ObjectStore,
    PartInfo,
    StoreError,
    StoreUnavailable,
    check_key,
)
from .common import (
    DEFAULT_CONTENT_TYPE,
    MIN_PART_SIZE,
    check_completion,
    check_part_number,
    clean_metadata,
    copy_body,
    multipart_etag,
    resolve_range,
)
from .localfs import (
    DIR,
    OBJECT,
    FileChunks,
    info_of,
    list_page,
    pump,
    read_trailer,
    segment_names,
    timestamp,
    trailer,
)

_UPLOAD_ID = re.compile(r"[0-9a-f]{32}\Z")
_PART_FILE = re.compile(r"([0-9]{1,5})\.part\Z")
_STALE_TMP = 24 * 3600  # seconds: a temp file this old was left by a crashed writer
_STALE_UPLOAD = 7 * 24 * 3600  # an upload without a new part for a week is abandoned


class LocalStore(ObjectStore):
    """Objects in a folder (see the module docstring for the layout)."""

    name = "local"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self._keys = os.path.join(self.root, "keys")
        self._uploads = os.path.join(self.root, ".uploads")
        self._tmp = os.path.join(self.root, ".tmp")
        for d in (self._keys, self._uploads, self._tmp):
            os.makedirs(d, exist_ok=True)
        self._sweep()

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LocalStore:
        root = config.get("ROOT")
        if not root:
            raise ValueError("RTC_OBJECT_STORE: the local backend needs ROOT")
        return cls(root)

    # --- paths -----------------------------------------------------------------------------
    def _key_path(self, key: str) -> str:
        check_key(key)
        segments = key.split("/")
        names: list[str] = []
        for segment in segments[:-1]:
            names += segment_names(segment, DIR)
        names += segment_names(segments[-1], OBJECT)
        return os.path.join(self._keys, *names)

    def _dir_path(self, segments: list[str]) -> str:
        names: list[str] = []
        for segment in segments:
            names += segment_names(segment, DIR)
        return os.path.join(self._keys, *names)

    def _sweep(self) -> None:
        """Remove what crashed writers and forgotten uploads left behind (the folder has no
        lifecycle rules to do it, as an S3 bucket would)."""
        now = time.time()
        with os.scandir(self._tmp) as found:
            for entry in found:
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < now - _STALE_TMP:
                        os.unlink(entry.path)
        with os.scandir(self._uploads) as found:
            for entry in found:
                with contextlib.suppress(OSError):
                    # A part added touches the folder: this is the time since the last one.
                    if entry.stat(follow_symlinks=False).st_mtime < now - _STALE_UPLOAD:
                        shutil.rmtree(entry.path)

    # --- writing ---------------------------------------------------------------------------
    def _write(
        self,
        final: str,
        fill: Callable[[IO[bytes]], dict[str, Any]],
        install: Callable[[str, str], None] | None = None,
    ) -> dict[str, Any]:
        """Build a file in .tmp (``fill`` writes the body and returns the trailer), fsync it
        and rename it to ``final``. On any error the temp file goes and ``final`` is as it was."""
        fd, tmp = tempfile.mkstemp(dir=self._tmp, prefix="w-")
        try:
            with os.fdopen(fd, "wb") as out:
                meta = fill(out)
                out.write(trailer(meta))
                out.flush()
                os.fsync(out.fileno())
            (install or self._install)(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return meta

    def _install(self, tmp: str, final: str) -> None:
        for _ in range(20):
            try:
                os.makedirs(os.path.dirname(final), exist_ok=True)
                os.replace(tmp, final)
                return
            except FileNotFoundError:
                if not os.path.exists(tmp):
                    raise
                # A delete pruned an emptied parent between makedirs and replace: again.
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    raise InvalidKey("the key is too long for this file system") from None
                raise
        raise StoreUnavailable("could not create the object's folder")

    def _prune(self, directory: str) -> None:
        """Remove directories a delete left empty, up to keys/ (a non-empty one stops it)."""
        while directory.startswith(self._keys + os.sep):
            try:
                os.rmdir(directory)
            except OSError:
                return
            directory = os.path.dirname(directory)

    # --- reading ---------------------------------------------------------------------------
    def _open(self, key: str) -> IO[bytes]:
        try:
            return open(self._key_path(key), "rb", buffering=0)
        except (FileNotFoundError, NotADirectoryError):
            raise NoSuchKey(f"no object {key!r}") from None
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                raise NoSuchKey(f"no object {key!r}") from None
            raise

    @staticmethod
    def _info(fd: int, key: str) -> ObjectInfo:
        return info_of(key, *read_trailer(fd))

    # --- objects ---------------------------------------------------------------------------
    def put(
        self,
        key: str,
        body: BinaryIO | bytes,
        *,
        length: int | None = None,
        content_type: str | None = None,
        metadata: dict[str, str] | None = None,
        content_md5: str | None = None,
    ) -> ObjectInfo:
        final = self._key_path(key)
        user_metadata = clean_metadata(metadata)
        size = 0

        def fill(out: IO[bytes]) -> dict[str, Any]:
            nonlocal size
            size, etag = copy_body(body, length, out.write, content_md5)
            return {
                "key": key,
                "etag": etag,
                "content_type": content_type or DEFAULT_CONTENT_TYPE,
                "metadata": user_metadata,
                "mtime": time.time(),
            }

        meta = self._write(final, fill)
        return info_of(key, size, meta)

    def get(self, key: str, *, start: int | None = None, end: int | None = None) -> ObjectBody:
        f = self._open(key)
        try:
            info = self._info(f.fileno(), key)
            first, length = resolve_range(info.size, start, end)
        except BaseException:
            f.close()
            raise
        return ObjectBody(info=info, start=first, length=length,
                          chunks=FileChunks(f, first, length))

    def head(self, key: str) -> ObjectInfo:
        with self._open(key) as f:
            return self._info(f.fileno(), key)

    def delete(self, key: str) -> None:
        path = self._key_path(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                return
            raise
        self._prune(os.path.dirname(path))

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        failures: list[DeleteFailure] = []
        for key in keys:
            try:
                self.delete(key)
            except StoreError as exc:
                failures.append(DeleteFailure(key, exc.code, str(exc)))
            except OSError as exc:
                failures.append(DeleteFailure(key, "InternalError", exc.strerror or "I/O error"))
        return failures

    def list(
        self,
        prefix: str = "",
        *,
        delimiter: str | None = None,
        max_keys: int = 1000,
        continuation_token: str | None = None,
        start_after: str | None = None,
    ) -> ListPage:
        segments = prefix.split("/")
        try:
            start = self._dir_path(segments[:-1])
        except UnicodeEncodeError:
            raise InvalidKey("the prefix is not valid Unicode") from None
        return list_page(
            start, "".join(s + "/" for s in segments[:-1]), prefix, delimiter=delimiter,
            max_keys=max_keys, continuation_token=continuation_token, start_after=start_after,
        )

    def copy(
        self,
        source_key: str,
        dest_key: str,
        *,
        metadata: dict[str, str] | None = None,
        content_type: str | None = None,
    ) -> ObjectInfo:
        final = self._key_path(dest_key)
        new_metadata = None if metadata is None else clean_metadata(metadata)
        with self._open(source_key) as src:
            info = self._info(src.fileno(), source_key)

            def fill(out: IO[bytes]) -> dict[str, Any]:
                md5 = hashlib.md5(usedforsecurity=False)

                def write(chunk: bytes) -> None:
                    md5.update(chunk)
                    out.write(chunk)

                pump(src.fileno(), info.size, write)
                return {
                    "key": dest_key,
                    "etag": md5.hexdigest(),
                    "content_type": content_type or info.content_type,
                    "metadata": info.metadata if new_metadata is None else new_metadata,
                    "mtime": time.time(),
                }

            return info_of(dest_key, info.size, self._write(final, fill))

    # --- multipart -------------------------------------------------------------------------
    def _upload(self, key: str, upload_id: str) -> tuple[str, dict[str, Any]]:
        check_key(key)
        if not isinstance(upload_id, str) or not _UPLOAD_ID.match(upload_id):
            raise NoSuchUpload("no such upload")
        directory = os.path.join(self._uploads, upload_id)
        try:
            with open(os.path.join(directory, "upload.json"), "rb") as f:
                upload = json.load(f)
        except FileNotFoundError:
            raise NoSuchUpload("no such upload") from None
        if upload.get("key") != key:
            raise NoSuchUpload("no such upload for this key")
        return directory, upload

    def create_multipart(
        self, key: str, *, content_type: str | None = None, metadata: dict[str, str] | None = None
    ) -> str:
        self._key_path(key)
        upload_id = secrets.token_hex(16)
        directory = os.path.join(self._uploads, upload_id)
        os.mkdir(directory)
        upload = {
            "key": key,
            "content_type": content_type or DEFAULT_CONTENT_TYPE,
            "metadata": clean_metadata(metadata),
            "initiated": time.time(),
        }
        fd, tmp = tempfile.mkstemp(dir=self._tmp, prefix="u-")
        with os.fdopen(fd, "w") as f:
            json.dump(upload, f)
        os.replace(tmp, os.path.join(directory, "upload.json"))
        return upload_id

    def upload_part(
        self, key: str, upload_id: str, part_number: int, body: BinaryIO | bytes,
        *, length: int | None = None,
    ) -> str:
        check_part_number(part_number)
        directory, _ = self._upload(key, upload_id)

        def fill(out: IO[bytes]) -> dict[str, Any]:
            _, etag = copy_body(body, length, out.write)
            return {"etag": etag, "mtime": time.time()}

        def install(tmp: str, final: str) -> None:
            try:
                os.replace(tmp, final)
            except FileNotFoundError:
                raise NoSuchUpload("the upload was completed or aborted meanwhile") from None

        meta = self._write(os.path.join(directory, f"{part_number}.part"), fill, install)
        return str(meta["etag"])

    def complete_multipart(
        self, key: str, upload_id: str, parts: list[tuple[int, str]]
    ) -> ObjectInfo:
        wanted = check_completion(parts)
        directory, upload = self._upload(key, upload_id)
        final = self._key_path(key)
        files: list[tuple[IO[bytes], int]] = []
        try:
            for i, (number, etag) in enumerate(wanted):
                try:
                    f = open(os.path.join(directory, f"{number}.part"), "rb", buffering=0)
                except FileNotFoundError:
                    raise InvalidPart(f"part {number} was not uploaded") from None
                files.append((f, 0))
                size, meta = read_trailer(f.fileno())
                files[-1] = (f, size)
                if meta["etag"] != etag:
                    raise InvalidPart(f"part {number}: the ETag does not match")
                if i < len(wanted) - 1 and size < MIN_PART_SIZE:
                    raise EntityTooSmall(f"part {number} is under 5 MiB and not the last")

            def fill(out: IO[bytes]) -> dict[str, Any]:
                for f, size in files:
                    pump(f.fileno(), size, out.write)
                return {
                    "key": key,
                    "etag": multipart_etag(e for _, e in wanted),
                    "content_type": upload["content_type"],
                    "metadata": upload["metadata"],
                    "mtime": time.time(),
                }

            meta = self._write(final, fill)
        finally:
            for f, _ in files:
                f.close()
        shutil.rmtree(directory, ignore_errors=True)
        return info_of(key, sum(size for _, size in files), meta)

    def abort_multipart(self, key: str, upload_id: str) -> None:
        directory, _ = self._upload(key, upload_id)
        shutil.rmtree(directory, ignore_errors=True)

    def list_parts(self, key: str, upload_id: str) -> list[PartInfo]:
        directory, _ = self._upload(key, upload_id)
        parts: list[PartInfo] = []
        for name in os.listdir(directory):
            match = _PART_FILE.match(name)
            if not match:
                continue
            try:
                with open(os.path.join(directory, name), "rb", buffering=0) as f:
                    size, meta = read_trailer(f.fileno())
            except FileNotFoundError:
                continue
            parts.append(PartInfo(int(match[1]), meta["etag"], size, timestamp(meta)))
        return sorted(parts, key=lambda p: p.part_number)

    # --- URLs and lifecycle ----------------------------------------------------------------
    def presign_get(self, key: str, *, expires_in: int) -> str:
        # The folder has no HTTP server: the URL is this project's /s3/, signed with the
        # server's service credential. Imported here: presign.py needs Django settings.
        from ..presign import service_presign

        check_key(key)
        return service_presign("GET", key, expires_in=expires_in)

    def presign_put(
        self, key: str, *, expires_in: int, content_type: str | None = None
    ) -> str:
        from ..presign import service_presign

        check_key(key)
        return service_presign("PUT", key, expires_in=expires_in, content_type=content_type)

    def health(self) -> None:
        try:
            if not os.path.isdir(self._keys):
                raise FileNotFoundError(errno.ENOENT, "keys folder missing")
            fd, probe = tempfile.mkstemp(dir=self._tmp, prefix="health-")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise StoreUnavailable(f"the object folder is not writable: {exc.strerror}") from None
