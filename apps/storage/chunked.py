"""Request bodies as S3 reads them: plain payloads and ``aws-chunked`` streams, verified on the fly.

``PayloadReader`` (built by ``sigv4.body_reader``) is a non-seekable file that yields the decoded
payload while it reads the request stream in bounded pieces (``READ_SIZE``), so no body is ever
held whole. What it checks, as S3 does:

* a hex ``x-amz-content-sha256``: the SHA-256 of the body (``XAmzContentSHA256Mismatch``);
* ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]``: each chunk's signature, chained from the seed
  signature, and the trailer's signature; ``STREAMING-UNSIGNED-PAYLOAD-TRAILER``: the framing only;
* ``x-amz-decoded-content-length``, ``Content-Length``, ``Content-MD5`` (``BadDigest``) and one
  flexible checksum (crc32, crc32c, crc64nvme, sha1, sha256) from an ``x-amz-checksum-*`` header
  or the trailer named by ``x-amz-trailer`` (``BadDigest``).

Invariant: the last bytes of the payload are handed out only after every check has passed (the
reader stays one piece ahead), so a caller that stops after the declared length, or reads to EOF,
has a verified body; any failure raises ``SignatureError`` and keeps raising on later reads. The
pieces before it may have been handed out already: the caller discards what it stored.

crc32c and crc64nvme are computed in pure Python (about 10 MB/s) rather than adding a C
dependency; botocore (boto3, the AWS CLI) defaults to crc32, which ``zlib`` computes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import io
import zlib
from collections.abc import Iterator, Mapping
from typing import BinaryIO, Protocol

from apps.storage.sigv4 import (
    EMPTY_SHA256,
    STREAMING_PAYLOADS,
    STREAMING_SIGNED,
    STREAMING_SIGNED_TRAILER,
    STREAMING_UNSIGNED_TRAILER,
    UNSIGNED_PAYLOAD,
    SignatureError,
    SignedRequest,
    sign,
)

READ_SIZE = 64 * 1024  # the most asked of the request stream at once
MAX_LINE = 4096  # a chunk header or trailer line longer than this is refused
_NOT_CHECKSUMS = frozenset(
    {"x-amz-checksum-algorithm", "x-amz-checksum-type", "x-amz-checksum-mode"}
)


# --- checksums -----------------------------------------------------------------------------


class _Digest(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...


def _reflected_table(poly: int) -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        table.append(crc)
    return table


class _TableCrc:
    """A reflected CRC with all-ones init and final xor, one table lookup per byte."""

    def __init__(self, table: list[int], width: int) -> None:
        self._table = table
        self._mask = (1 << width) - 1
        self._size = width // 8
        self._crc = 0

    def update(self, data: bytes) -> None:
        table = self._table
        crc = self._crc ^ self._mask
        for byte in data:
            crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        self._crc = crc ^ self._mask

    def digest(self) -> bytes:
        return self._crc.to_bytes(self._size, "big")


class _Crc32:
    def __init__(self) -> None:
        self._crc = 0

    def update(self, data: bytes) -> None:
        self._crc = zlib.crc32(data, self._crc)

    def digest(self) -> bytes:
        return self._crc.to_bytes(4, "big")


_CRC32C_TABLE = _reflected_table(0x82F63B78)  # Castagnoli
_CRC64NVME_TABLE = _reflected_table(0x9A6C9329AC4BC9B5)

# name -> (factory, digest size): the algorithms S3 calls ChecksumAlgorithm.
CHECKSUMS: dict[str, tuple] = {
    "crc32": (_Crc32, 4),
    "crc32c": (lambda: _TableCrc(_CRC32C_TABLE, 32), 4),
    "crc64nvme": (lambda: _TableCrc(_CRC64NVME_TABLE, 64), 8),
    "sha1": (hashlib.sha1, 20),
    "sha256": (hashlib.sha256, 32),
}


def checksum(algorithm: str, data: bytes) -> str:
    """The base64 checksum S3 would give ``data`` (tests, and callers that echo checksums)."""
    digest = CHECKSUMS[algorithm][0]()
    digest.update(data)
    return base64.b64encode(digest.digest()).decode("ascii")


def _decode_b64(value: str, size: int) -> bytes | None:
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == size else None


# --- framing helpers for callers -----------------------------------------------------------


def _int_header(headers: Mapping[str, str], name: str) -> int | None:
    raw = headers.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not raw.isascii():
        raise SignatureError("InvalidArgument", f"{name} must be a non-negative integer.", 400)
    return int(raw)


def declared_length(req: SignedRequest, headers: Mapping[str, str]) -> int | None:
    """The payload size the request announces (``x-amz-decoded-content-length`` for aws-chunked
    bodies, else ``Content-Length``), to refuse an oversized upload before reading it."""
    if req.streaming:
        return _int_header(headers, "x-amz-decoded-content-length")
    return _int_header(headers, "content-length")


def stored_content_encoding(headers: Mapping[str, str]) -> str | None:
    """``Content-Encoding`` without ``aws-chunked`` (a transfer detail S3 does not store)."""
    codings = [c.strip() for c in headers.get("content-encoding", "").split(",")]
    kept = [c for c in codings if c and c.lower() != "aws-chunked"]
    return ",".join(kept) or None


# --- the request stream --------------------------------------------------------------------


class _Source:
    """The request stream, read at most ``READ_SIZE`` bytes at a time and never past ``limit``."""

    def __init__(self, stream: BinaryIO, limit: int | None) -> None:
        self._stream = stream
        self._left = limit
        self._buffer = bytearray()

    def _pull(self, size: int) -> bytes:
        if self._left is not None:
            size = min(size, self._left)
        if size <= 0:
            return b""
        data = self._stream.read(min(size, READ_SIZE)) or b""
        if self._left is not None:
            self._left -= len(data)
        return data

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes; ``b""`` at the end."""
        if not self._buffer:
            data = self._pull(size)
            if len(data) <= size:
                return data
            self._buffer += data  # a stream that handed out more than asked: keep the rest
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def readline(self) -> bytes:
        """The next CRLF-terminated line, without its CRLF (``b""`` for an empty line)."""
        while True:
            end = self._buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 2]
                if len(line) > MAX_LINE:
                    break
                return line
            if len(self._buffer) > MAX_LINE:
                break
            data = self._pull(READ_SIZE)
            if not data:
                raise _incomplete()
            self._buffer += data
        raise SignatureError("InvalidRequest", "A chunk header or trailer line is too long.", 400)

    def at_end(self) -> bool:
        if self._buffer:
            return False
        data = self._pull(1)
        if data:
            self._buffer += data
            return False
        return True

    def exhausted_limit(self) -> bool:
        return self._left is None or self._left <= 0


def _incomplete() -> SignatureError:
    return SignatureError(
        "IncompleteBody", "The request body terminated unexpectedly before its declared end.", 400
    )


def _malformed(why: str) -> SignatureError:
    return SignatureError("InvalidRequest", f"Malformed aws-chunked body: {why}", 400)


def _malformed_trailer(why: str) -> SignatureError:
    return SignatureError(
        "MalformedTrailerError",
        f"The request contained trailing data that was not well-formed: {why}",
        400,
    )


# --- the reader ----------------------------------------------------------------------------


class PayloadReader(io.RawIOBase):
    """The decoded payload of one request (see the module docstring). After the end,
    ``checksum`` is ``(header name, base64 value)`` of the verified flexible checksum, if any."""

    def __init__(
        self,
        req: SignedRequest,
        stream: BinaryIO,
        *,
        headers: Mapping[str, str],
        signing_key: bytes,
    ) -> None:
        super().__init__()
        self._req = req
        self._key = signing_key
        self.checksum: tuple[str, str] | None = None
        self._error: BaseException | None = None
        self._current = memoryview(b"")
        self._ahead: bytes | None = None
        self._started = False

        content_length = _int_header(headers, "content-length")
        chunked_transfer = "chunked" in headers.get("transfer-encoding", "").lower()
        if content_length is None and not chunked_transfer:
            raise SignatureError(
                "MissingContentLength", "You must provide the Content-Length HTTP header.", 411
            )
        self._content_length = content_length
        self._source = _Source(stream, content_length)

        aws_chunked = any(
            c.strip().lower() == "aws-chunked"
            for c in headers.get("content-encoding", "").split(",")
        )
        if aws_chunked and not req.streaming:
            raise _malformed(
                "Content-Encoding aws-chunked needs a STREAMING-* x-amz-content-sha256."
            )
        self.length = declared_length(req, headers)
        if req.streaming and self.length is None:
            raise SignatureError(
                "MissingContentLength",
                "You must provide the x-amz-decoded-content-length header with an aws-chunked "
                "body.",
                411,
            )

        self._md5_expected: bytes | None = None
        if "content-md5" in headers:
            self._md5_expected = _decode_b64(headers["content-md5"], 16)
            if self._md5_expected is None:
                raise SignatureError(
                    "InvalidDigest", "The Content-MD5 you specified was not valid.", 400
                )
        self._md5 = hashlib.md5() if self._md5_expected is not None else None  # noqa: S324 (S3's own)

        self._sha256 = None
        if req.payload_hash not in STREAMING_PAYLOADS and req.payload_hash != UNSIGNED_PAYLOAD:
            self._sha256 = hashlib.sha256()
        self._setup_checksum(headers)
        self._pieces = self._chunked() if req.streaming else self._plain()

    def _setup_checksum(self, headers: Mapping[str, str]) -> None:
        trailers = [
            t.strip().lower() for t in headers.get("x-amz-trailer", "").split(",") if t.strip()
        ]
        if trailers and self._req.payload_hash not in (
            STREAMING_UNSIGNED_TRAILER,
            STREAMING_SIGNED_TRAILER,
        ):
            raise SignatureError(
                "InvalidRequest",
                "x-amz-trailer needs a STREAMING-*-TRAILER x-amz-content-sha256.",
                400,
            )
        for name in trailers:
            if not name.startswith("x-amz-checksum-") or name in _NOT_CHECKSUMS:
                raise SignatureError("InvalidRequest", f"The trailer {name} is not supported.", 400)
        in_headers = [
            name
            for name in headers
            if name.startswith("x-amz-checksum-") and name not in _NOT_CHECKSUMS
        ]
        named = in_headers + trailers
        if len(named) > 1 or len(trailers) != len(set(trailers)):
            raise SignatureError(
                "InvalidRequest",
                "Expecting a single x-amz-checksum- header. "
                "Multiple checksum Types are not allowed.",
                400,
            )
        self._trailer_name = trailers[0] if trailers else None
        self._checksum_name = named[0] if named else None
        self._checksum_expected: bytes | None = None
        self._checksum: _Digest | None = None
        sdk_algorithm = headers.get("x-amz-sdk-checksum-algorithm", "").strip().lower()
        if self._checksum_name is None:
            if sdk_algorithm:
                raise SignatureError(
                    "InvalidRequest",
                    "x-amz-sdk-checksum-algorithm specified, but no corresponding x-amz-checksum-* "
                    "or x-amz-trailer headers were found.",
                    400,
                )
            return
        algorithm = self._checksum_name.removeprefix("x-amz-checksum-")
        if algorithm not in CHECKSUMS:
            raise SignatureError(
                "InvalidRequest",
                f"The checksum algorithm {algorithm.upper()} is not supported.",
                400,
            )
        if sdk_algorithm and sdk_algorithm != algorithm:
            raise SignatureError(
                "InvalidRequest",
                "Value for x-amz-sdk-checksum-algorithm header is invalid: expected "
                f"{algorithm.upper()}.",
                400,
            )
        factory, size = CHECKSUMS[algorithm]
        self._checksum = factory()
        self._checksum_size = size
        if self._trailer_name is None:
            self._checksum_expected = _decode_b64(headers[self._checksum_name], size)
            if self._checksum_expected is None:
                raise SignatureError(
                    "InvalidRequest", f"Value for {self._checksum_name} header is invalid.", 400
                )

    # --- file interface --------------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def _take(self, size: int) -> memoryview:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        if self._error is not None:
            raise self._error
        if not self._current:
            try:
                self._current = memoryview(self._next_piece())
            except BaseException as exc:
                # Sticky: a caller that swallows the error must never see a clean end after it.
                self._error = exc
                raise
        piece = self._current[:size]
        self._current = self._current[size:]
        return piece

    def readinto(self, buffer) -> int:  # type: ignore[override]
        size = len(buffer)
        if size == 0:
            return 0
        piece = self._take(size)
        buffer[: len(piece)] = piece
        return len(piece)

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return self.readall()
        if size == 0:
            return b""
        return bytes(self._take(size))

    def readall(self) -> bytes:
        parts = []
        while piece := self._take(READ_SIZE):
            parts.append(bytes(piece))
        return b"".join(parts)

    def _next_piece(self) -> bytes:
        # One piece ahead: a piece is released only once the next one exists, or once the
        # generator has finished, which is after every end-of-body check.
        if not self._started:
            self._started = True
            self._ahead = next(self._pieces, None)
        piece = self._ahead
        if piece is None:
            return b""
        self._ahead = next(self._pieces, None)
        return piece

    # --- decoding --------------------------------------------------------------------------

    def _consume(self, piece: bytes) -> None:
        for digest in (self._md5, self._sha256, self._checksum):
            if digest is not None:
                digest.update(piece)

    def _plain(self) -> Iterator[bytes]:
        total = 0
        while piece := self._source.read(READ_SIZE):
            total += len(piece)
            self._consume(piece)
            yield piece
        if self._content_length is not None and total < self._content_length:
            raise _incomplete()
        if self._sha256 is not None:
            computed = self._sha256.hexdigest()
            if computed != self._req.payload_hash.lower():
                raise SignatureError(
                    "XAmzContentSHA256Mismatch",
                    "The provided 'x-amz-content-sha256' header does not match what was computed.",
                    400,
                    detail={
                        "ClientComputedContentSHA256": self._req.payload_hash,
                        "S3ComputedContentSHA256": computed,
                    },
                )
        self._finish(self._checksum_expected)

    def _chunked(self) -> Iterator[bytes]:
        signed = self._req.payload_hash in (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER)
        previous = self._req.signature
        expected_total = self.length or 0
        total = 0
        while True:
            size, claimed = self._chunk_header(signed)
            if total + size > expected_total:
                raise _malformed("the chunks hold more than x-amz-decoded-content-length.")
            chunk_hash = hashlib.sha256() if signed else None
            left = size
            while left:
                piece = self._source.read(min(left, READ_SIZE))
                if not piece:
                    raise _incomplete()
                left -= len(piece)
                total += len(piece)
                if chunk_hash is not None:
                    chunk_hash.update(piece)
                self._consume(piece)
                yield piece
            if chunk_hash is not None:
                previous = self._check_chunk(previous, claimed, chunk_hash.hexdigest())
            if size == 0:
                break
            if self._source.read(2) != b"\r\n":
                raise _malformed("a chunk's data is not followed by CRLF.")
        if total < expected_total:
            raise _incomplete()
        trailer_value = (
            self._trailer(previous, signed) if self._trailer_name else self._no_trailer()
        )
        if not self._source.at_end():
            raise _malformed("data follows the final chunk.")
        if not self._source.exhausted_limit():
            raise _incomplete()
        if trailer_value is not None:
            self._finish(trailer_value)
        else:
            self._finish(self._checksum_expected)

    def _chunk_header(self, signed: bool) -> tuple[int, str | None]:
        line = self._source.readline()
        size_text, _, extension = line.partition(b";")
        try:
            size_str = size_text.decode("ascii").strip()
            if (
                not size_str
                or len(size_str) > 16
                or not all(c in "0123456789abcdefABCDEF" for c in size_str)
            ):
                raise ValueError
            size = int(size_str, 16)
        except (UnicodeDecodeError, ValueError):
            raise _malformed("a chunk size is not hexadecimal.") from None
        if not signed:
            return size, None
        name, _, value = extension.decode("ascii", "replace").partition("=")
        if name.strip() != "chunk-signature" or len(value.strip()) != 64:
            raise SignatureError(
                "SignatureDoesNotMatch",
                "A chunk of a signed aws-chunked body has no chunk-signature.",
            )
        return size, value.strip().lower()

    def _check_chunk(self, previous: str, claimed: str | None, chunk_sha256: str) -> str:
        req = self._req
        text = (
            f"AWS4-HMAC-SHA256-PAYLOAD\n{req.timestamp}\n{req.date_scope}\n{previous}\n"
            f"{EMPTY_SHA256}\n{chunk_sha256}"
        )
        expected = sign(self._key, text)
        if claimed is None or not hmac.compare_digest(expected, claimed):
            raise SignatureError(
                "SignatureDoesNotMatch",
                "The chunk signature we calculated does not match the signature you provided.",
                detail={"StringToSign": text, "SignatureProvided": claimed or ""},
            )
        return expected

    def _no_trailer(self) -> None:
        # The final "0\r\n" is followed by an empty line; tolerate a body that simply ends.
        if not self._source.at_end() and self._source.readline() != b"":
            raise _malformed("the final chunk is not followed by CRLF.")
        return None

    def _trailer(self, previous: str, signed: bool) -> bytes:
        """Reads the trailer lines (and their signature when signed); returns the checksum."""
        lines: list[tuple[str, str]] = []
        signature: str | None = None
        first = True
        while True:
            line = b"" if self._source.at_end() else self._source.readline()
            if not line:
                # Some SDKs put an empty line between the final chunk and the trailer.
                if first and not self._source.at_end():
                    first = False
                    continue
                break
            first = False
            name, colon, value = line.decode("utf-8", "replace").partition(":")
            name, value = name.strip().lower(), value.strip()
            if not colon:
                raise _malformed_trailer("a trailer line has no colon.")
            if name == "x-amz-trailer-signature" and signed and signature is None:
                signature = value.lower()
                continue
            if name != self._trailer_name or lines or signature is not None:
                raise _malformed_trailer(f"unexpected trailer {name!r}.")
            lines.append((name, value))
        if not lines:
            raise _malformed_trailer(f"the trailer {self._trailer_name} is missing.")
        if signed:
            canonical = "".join(f"{name}:{value}\n" for name, value in lines)
            req = self._req
            text = (
                f"AWS4-HMAC-SHA256-TRAILER\n{req.timestamp}\n{req.date_scope}\n{previous}\n"
                f"{hashlib.sha256(canonical.encode('utf-8')).hexdigest()}"
            )
            if signature is None or not hmac.compare_digest(sign(self._key, text), signature):
                raise SignatureError(
                    "SignatureDoesNotMatch",
                    "The trailer signature we calculated does not match the signature you "
                    "provided.",
                    detail={"StringToSign": text, "SignatureProvided": signature or ""},
                )
        value = _decode_b64(lines[0][1], self._checksum_size)
        if value is None:
            raise SignatureError(
                "InvalidRequest", f"Value for {self._trailer_name} trailer is invalid.", 400
            )
        return value

    def _finish(self, checksum_expected: bytes | None) -> None:
        if self._md5 is not None and self._md5.digest() != self._md5_expected:
            raise SignatureError(
                "BadDigest", "The Content-MD5 you specified did not match what we received.", 400
            )
        if self._checksum is not None and self._checksum_name is not None:
            computed = self._checksum.digest()
            if computed != checksum_expected:
                algorithm = self._checksum_name.removeprefix("x-amz-checksum-").upper()
                raise SignatureError(
                    "BadDigest",
                    f"The {algorithm} you specified did not match the calculated checksum.",
                    400,
                )
            self.checksum = (self._checksum_name, base64.b64encode(computed).decode("ascii"))
