"""Request bodies: plain payloads, aws-chunked streams (signed, unsigned with a trailer, signed
with a signed trailer) and checksums, against the S3 documentation's examples, botocore's own
framing, and hand-built tampered bodies. The reader is fed through a stream that records every
read, to hold it to bounded reads."""

from __future__ import annotations

import base64
import hashlib
import io
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from apps.storage import chunked, sigv4
from apps.storage.sigv4 import SignatureError

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
WHEN = datetime(2013, 5, 24, tzinfo=UTC)
SCOPE = "20130524/us-east-1/s3/aws4_request"
KEY = sigv4.signing_key(SECRET, "20130524", "us-east-1", "s3")
DATA = b"a" * 66560  # the S3 documentation's object: a 64 KiB chunk, a 1 KiB chunk, the last


class RecordingStream(io.RawIOBase):
    """A request stream that hands out at most what is asked and records each request."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self.sizes: list[int | None] = []

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        self.sizes.append(size)
        if size is None or size < 0:
            size = len(self._data)
        piece, self._data = self._data[:size], self._data[size:]
        return bytes(piece)


def _request(payload_hash: str, seed: str = "0" * 64) -> sigv4.SignedRequest:
    return sigv4.SignedRequest(
        access_key_id="AKIAIOSFODNN7EXAMPLE",
        region="us-east-1",
        service="s3",
        amz_date=WHEN,
        date_scope=SCOPE,
        signed_headers=("host",),
        signature=seed,
        presigned=False,
        expires_in=None,
        session_token=None,
        payload_hash=payload_hash,
    )


def _reader(
    req: sigv4.SignedRequest,
    body: bytes,
    headers: dict[str, str],
    stream: io.RawIOBase | None = None,
) -> Any:
    return sigv4.body_reader(req, stream or RecordingStream(body), headers=headers, signing_key=KEY)


def _fails(code: str, reader: Any, *, read_size: int = 10_000) -> SignatureError:
    with pytest.raises(SignatureError) as caught:
        while reader.read(read_size):
            pass
    assert caught.value.code == code, caught.value.message
    # The failure sticks: a caller that swallowed it never gets a clean end of body.
    with pytest.raises(SignatureError):
        reader.read(1)
    return caught.value


# --- the S3 documentation's signed examples --------------------------------------------------

SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
CHUNK_SIGNATURES = [
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
]
TRAILER_SEED = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"
TRAILER_CHUNK_SIGNATURES = [
    "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
    "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
    "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
]
TRAILER_SIGNATURE = "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"


def _example_body(signatures: list[str], tail: bytes = b"\r\n") -> bytes:
    return (
        f"10000;chunk-signature={signatures[0]}\r\n".encode()
        + DATA[:65536]
        + b"\r\n"
        + f"400;chunk-signature={signatures[1]}\r\n".encode()
        + DATA[65536:]
        + b"\r\n"
        + f"0;chunk-signature={signatures[2]}\r\n".encode()
        + tail
    )


def _example_headers(body: bytes, **extra: str) -> dict[str, str]:
    return {
        "content-encoding": "aws-chunked",
        "content-length": str(len(body)),
        "x-amz-decoded-content-length": "66560",
        "x-amz-storage-class": "REDUCED_REDUNDANCY",
        **extra,
    }


def test_s3_example_seed_signature_verifies() -> None:
    """The documented PUT of chunkObject.txt: the headers' seed signature, through parse/verify."""
    headers = {
        "host": "s3.amazonaws.com",
        "x-amz-date": "20130524T000000Z",
        "x-amz-storage-class": "REDUCED_REDUNDANCY",
        "content-encoding": "aws-chunked",
        "content-length": "66824",
        "x-amz-decoded-content-length": "66560",
        "x-amz-content-sha256": sigv4.STREAMING_SIGNED,
        "authorization": (
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
            f"x-amz-decoded-content-length;x-amz-storage-class,Signature={SEED}"
        ),
    }
    req = sigv4.parse("PUT", "/examplebucket/chunkObject.txt", "", headers)
    key = sigv4.verify(
        req,
        secret_key=SECRET,
        method="PUT",
        raw_path="/examplebucket/chunkObject.txt",
        raw_query="",
        headers=headers,
        now=WHEN,
    )
    body = _example_body(CHUNK_SIGNATURES)
    assert len(body) == 66824
    reader = sigv4.body_reader(req, RecordingStream(body), headers=headers, signing_key=key)
    assert reader.read() == DATA


def test_s3_example_signed_chunks_decode() -> None:
    body = _example_body(CHUNK_SIGNATURES)
    reader = _reader(_request(sigv4.STREAMING_SIGNED, SEED), body, _example_headers(body))
    assert reader.read() == DATA
    assert reader.read(10) == b""
    assert reader.checksum is None


def test_s3_example_signed_chunks_tampered() -> None:
    body = _example_body(CHUNK_SIGNATURES)
    headers = _example_headers(body)
    flipped = bytearray(body)
    flipped[len(body) - 400] = ord("b")  # inside the 1 KiB chunk
    _fails(
        "SignatureDoesNotMatch",
        _reader(_request(sigv4.STREAMING_SIGNED, SEED), bytes(flipped), headers),
    )
    forged = body.replace(CHUNK_SIGNATURES[1].encode(), b"f" * 64)
    _fails(
        "SignatureDoesNotMatch", _reader(_request(sigv4.STREAMING_SIGNED, SEED), forged, headers)
    )
    # Chunks replayed under another seed (another request) do not chain.
    _fails(
        "SignatureDoesNotMatch", _reader(_request(sigv4.STREAMING_SIGNED, "1" * 64), body, headers)
    )
    unsigned = body.replace(f";chunk-signature={CHUNK_SIGNATURES[0]}".encode(), b"")
    _fails(
        "SignatureDoesNotMatch", _reader(_request(sigv4.STREAMING_SIGNED, SEED), unsigned, headers)
    )


@pytest.mark.parametrize("gap", [b"", b"\r\n"], ids=["trailer-right-after", "blank-line-first"])
def test_s3_example_signed_trailer_decodes(gap: bytes) -> None:
    tail = (
        gap
        + (
            f"x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:{TRAILER_SIGNATURE}\r\n\r\n"
        ).encode()
    )
    body = _example_body(TRAILER_CHUNK_SIGNATURES, tail)
    headers = _example_headers(body, **{"x-amz-trailer": "x-amz-checksum-crc32c"})
    reader = _reader(_request(sigv4.STREAMING_SIGNED_TRAILER, TRAILER_SEED), body, headers)
    assert reader.read() == DATA
    assert reader.checksum == ("x-amz-checksum-crc32c", "sOO8/Q==")


def test_s3_example_signed_trailer_tampered() -> None:
    good = f"x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:{TRAILER_SIGNATURE}\r\n\r\n"
    headers = {"x-amz-trailer": "x-amz-checksum-crc32c"}

    def run(tail: str) -> Any:
        body = _example_body(TRAILER_CHUNK_SIGNATURES, tail.encode())
        return _reader(
            _request(sigv4.STREAMING_SIGNED_TRAILER, TRAILER_SEED),
            body,
            _example_headers(body, **headers),
        )

    # Another checksum value: the trailer signature no longer matches.
    _fails("SignatureDoesNotMatch", run(good.replace("sOO8/Q==", "AAAAAA==")))
    _fails("SignatureDoesNotMatch", run(good.replace(TRAILER_SIGNATURE, "0" * 64)))
    _fails("SignatureDoesNotMatch", run("x-amz-checksum-crc32c:sOO8/Q==\r\n\r\n"))
    _fails("MalformedTrailerError", run(f"x-amz-trailer-signature:{TRAILER_SIGNATURE}\r\n\r\n"))
    _fails("MalformedTrailerError", run("x-amz-checksum-sha1:sOO8/Q==\r\n\r\n"))
    _fails("MalformedTrailerError", run("\r\n"))


# --- signed chunks built by the spec (botocore does not send them) ---------------------------


def _signed_chunks(
    data: bytes, seed: str, chunk_size: int, trailer: tuple[str, str] | None = None
) -> bytes:
    """Frames ``data`` as STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER], by the S3 documentation."""
    out = bytearray()
    previous = seed
    pieces = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)] + [b""]
    for piece in pieces:
        text = (
            f"AWS4-HMAC-SHA256-PAYLOAD\n20130524T000000Z\n{SCOPE}\n{previous}\n"
            f"{sigv4.EMPTY_SHA256}\n{hashlib.sha256(piece).hexdigest()}"
        )
        previous = sigv4.sign(KEY, text)
        out += f"{len(piece):x};chunk-signature={previous}\r\n".encode() + piece
        if piece or trailer is None:
            out += b"\r\n"
    if trailer is not None:
        line = f"{trailer[0]}:{trailer[1]}\n"
        text = (
            f"AWS4-HMAC-SHA256-TRAILER\n20130524T000000Z\n{SCOPE}\n{previous}\n"
            f"{hashlib.sha256(line.encode()).hexdigest()}"
        )
        signature = sigv4.sign(KEY, text)
        out += f"{trailer[0]}:{trailer[1]}\r\nx-amz-trailer-signature:{signature}\r\n\r\n".encode()
    return bytes(out)


def test_built_signed_chunks_match_the_documented_signatures() -> None:
    assert _signed_chunks(DATA, SEED, 65536) == _example_body(CHUNK_SIGNATURES)


@pytest.mark.parametrize("algorithm", sorted(chunked.CHECKSUMS))
def test_signed_trailer_with_each_checksum(algorithm: str) -> None:
    data = bytes(range(256)) * 40
    trailer = (f"x-amz-checksum-{algorithm}", chunked.checksum(algorithm, data))
    body = _signed_chunks(data, SEED, 8192, trailer)
    headers = {
        "content-length": str(len(body)),
        "x-amz-decoded-content-length": str(len(data)),
        "x-amz-trailer": trailer[0],
        "x-amz-sdk-checksum-algorithm": algorithm.upper(),
    }
    reader = _reader(_request(sigv4.STREAMING_SIGNED_TRAILER, SEED), body, headers)
    assert reader.read() == data
    assert reader.checksum == trailer


def test_signed_trailer_with_a_wrong_checksum_is_bad_digest() -> None:
    data = b"x" * 20_000
    trailer = ("x-amz-checksum-crc32", chunked.checksum("crc32", b"y" * 20_000))
    body = _signed_chunks(data, SEED, 8192, trailer)
    headers = {
        "content-length": str(len(body)),
        "x-amz-decoded-content-length": "20000",
        "x-amz-trailer": "x-amz-checksum-crc32",
    }
    error = _fails(
        "BadDigest", _reader(_request(sigv4.STREAMING_SIGNED_TRAILER, SEED), body, headers)
    )
    assert "CRC32" in error.message


# --- botocore's own framing (what boto3 sends by default) ------------------------------------


def _boto3_put(endpoint: str, body: bytes, **params: Any) -> tuple[dict[str, str], bytes, str]:
    """What unmodified boto3 sends for a PutObject to ``endpoint`` (captured before the network):
    headers, body bytes, and the request's path and query."""
    sent: list[tuple[dict[str, str], bytes, str]] = []

    class Empty:
        def stream(self, **_: Any) -> Any:
            yield b""

    def capture(request: Any, **_: Any) -> AWSResponse:
        data = request.body.read() if hasattr(request.body, "read") else (request.body or b"")
        headers = {
            k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()
        }
        headers.setdefault("host", request.url.split("/")[2])
        sent.append((headers, data, request.url.split("/", 3)[3]))
        return AWSResponse(request.url, 200, {"ETag": '"e"'}, Empty())

    client = boto3.session.Session(
        aws_access_key_id="AKID",
        aws_secret_access_key="secret",
        aws_session_token="tok",
        region_name="us-east-1",
    ).client("s3", endpoint_url=f"{endpoint}/s3", config=Config(s3={"addressing_style": "path"}))
    client.meta.events.register("before-send.s3.PutObject", capture)
    client.put_object(Bucket="rtc-agent", Key="user-1/k ü.bin", Body=io.BytesIO(body), **params)
    (result,) = sent
    return result


def _verified(headers: dict[str, str], target: str) -> tuple[sigv4.SignedRequest, bytes]:
    path, _, query = ("/" + target).partition("?")
    req = sigv4.parse("PUT", path, query, headers)
    key = sigv4.verify(
        req,
        secret_key="secret",
        method="PUT",
        raw_path=path,
        raw_query=query,
        headers=headers,
        now=req.amz_date,
    )
    return req, key


BIG = bytes(range(251)) * 9000  # 2.2 MB: botocore frames it in 1 MiB chunks


def test_boto3_https_put_is_an_unsigned_trailer_stream() -> None:
    headers, body, target = _boto3_put("https://files.example.test", BIG)
    assert headers["x-amz-content-sha256"] == sigv4.STREAMING_UNSIGNED_TRAILER
    assert headers["x-amz-trailer"] == "x-amz-checksum-crc32"
    req, key = _verified(headers, target)
    assert chunked.declared_length(req, headers) == len(BIG)
    assert chunked.stored_content_encoding(headers) is None
    stream = RecordingStream(body)
    reader = sigv4.body_reader(req, stream, headers=headers, signing_key=key)
    assert reader.read() == BIG
    assert reader.checksum == ("x-amz-checksum-crc32", chunked.checksum("crc32", BIG))
    assert max(s for s in stream.sizes if s is not None) <= chunked.READ_SIZE


def test_boto3_https_put_tampered() -> None:
    headers, body, target = _boto3_put("https://files.example.test", BIG)
    req, key = _verified(headers, target)
    flipped = bytearray(body)
    flipped[len(body) // 2] ^= 1
    _fails(
        "BadDigest",
        sigv4.body_reader(req, RecordingStream(bytes(flipped)), headers=headers, signing_key=key),
    )
    crc = chunked.checksum("crc32", BIG).encode()
    wrong = body.replace(crc, base64.b64encode(b"\0\0\0\0"))
    _fails(
        "BadDigest",
        sigv4.body_reader(req, RecordingStream(wrong), headers=headers, signing_key=key),
    )
    truncated = body[: len(body) // 2]
    _fails(
        "IncompleteBody",
        sigv4.body_reader(req, RecordingStream(truncated), headers=headers, signing_key=key),
    )
    no_trailer = body[: body.rindex(b"0\r\n")] + b"0\r\n\r\n"
    _fails(
        "MalformedTrailerError",
        sigv4.body_reader(req, RecordingStream(no_trailer), headers=headers, signing_key=key),
    )
    longer = {**headers, "x-amz-decoded-content-length": str(len(BIG) - 1)}
    _fails(
        "InvalidRequest",
        sigv4.body_reader(req, RecordingStream(body), headers=longer, signing_key=key),
    )
    shorter = {**headers, "x-amz-decoded-content-length": str(len(BIG) + 1)}
    _fails(
        "IncompleteBody",
        sigv4.body_reader(req, RecordingStream(body), headers=shorter, signing_key=key),
    )
    junk = body + b"GET / HTTP/1.1\r\n"
    _fails(
        "InvalidRequest",
        sigv4.body_reader(req, RecordingStream(junk), headers=headers, signing_key=key),
    )


def test_boto3_http_put_is_a_hashed_body_with_a_checksum_header() -> None:
    headers, body, target = _boto3_put("http://127.0.0.1:8000", BIG, ContentType="text/plain")
    assert headers["x-amz-content-sha256"] == hashlib.sha256(BIG).hexdigest()
    assert "x-amz-checksum-crc32" in headers
    req, key = _verified(headers, target)
    reader = sigv4.body_reader(req, RecordingStream(body), headers=headers, signing_key=key)
    assert reader.read() == BIG
    assert reader.checksum == ("x-amz-checksum-crc32", headers["x-amz-checksum-crc32"])

    flipped = bytearray(body)
    flipped[-1] ^= 1
    error = _fails(
        "XAmzContentSHA256Mismatch",
        sigv4.body_reader(req, RecordingStream(bytes(flipped)), headers=headers, signing_key=key),
    )
    assert error.status == 400
    assert error.detail["S3ComputedContentSHA256"] == hashlib.sha256(bytes(flipped)).hexdigest()
    _fails(
        "IncompleteBody",
        sigv4.body_reader(req, RecordingStream(body[:-10]), headers=headers, signing_key=key),
    )


def test_boto3_put_with_content_md5_and_sha256_checksum() -> None:
    md5 = base64.b64encode(hashlib.md5(BIG).digest()).decode()  # noqa: S324 (S3's Content-MD5)
    headers, body, target = _boto3_put(
        "http://127.0.0.1:8000", BIG, ContentMD5=md5, ChecksumAlgorithm="SHA256"
    )
    req, key = _verified(headers, target)
    reader = sigv4.body_reader(req, RecordingStream(body), headers=headers, signing_key=key)
    assert reader.read() == BIG
    assert reader.checksum == ("x-amz-checksum-sha256", chunked.checksum("sha256", BIG))
    other_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()  # noqa: S324
    error = _fails(
        "BadDigest",
        sigv4.body_reader(
            req,
            RecordingStream(body),
            headers={**headers, "content-md5": other_md5},
            signing_key=key,
        ),
    )
    assert "Content-MD5" in error.message


# --- plain bodies and header checks ----------------------------------------------------------


def test_unsigned_payload_passes_through_with_length_checked() -> None:
    req = _request(sigv4.UNSIGNED_PAYLOAD)
    assert _reader(req, b"hello", {"content-length": "5"}).read() == b"hello"
    _fails("IncompleteBody", _reader(req, b"hel", {"content-length": "5"}))
    # Bytes past Content-Length are not part of the body, and are never read.
    stream = RecordingStream(b"hello, and more")
    assert _reader(req, b"", {"content-length": "5"}, stream).read() == b"hello"
    assert (
        _reader(req, b"", {"transfer-encoding": "chunked"}, RecordingStream(b"abc")).read()
        == b"abc"
    )


@pytest.mark.parametrize(
    ("req_hash", "headers", "code", "status"),
    [
        (sigv4.UNSIGNED_PAYLOAD, {}, "MissingContentLength", 411),
        (sigv4.UNSIGNED_PAYLOAD, {"content-length": "-1"}, "InvalidArgument", 400),
        (sigv4.STREAMING_UNSIGNED_TRAILER, {"content-length": "10"}, "MissingContentLength", 411),
        (
            sigv4.UNSIGNED_PAYLOAD,
            {"content-length": "1", "content-encoding": "aws-chunked"},
            "InvalidRequest",
            400,
        ),
        (
            sigv4.UNSIGNED_PAYLOAD,
            {"content-length": "1", "content-md5": "nope"},
            "InvalidDigest",
            400,
        ),
        (
            sigv4.UNSIGNED_PAYLOAD,
            {"content-length": "1", "x-amz-checksum-crc32": "AAAA"},
            "InvalidRequest",
            400,
        ),
        (
            sigv4.UNSIGNED_PAYLOAD,
            {"content-length": "1", "x-amz-checksum-xxhash64": "AAAAAAAAAAA="},
            "InvalidRequest",
            400,
        ),
        (
            sigv4.UNSIGNED_PAYLOAD,
            {
                "content-length": "1",
                "x-amz-checksum-crc32": "AAAAAA==",
                "x-amz-checksum-sha1": "A" * 27 + "=",
            },
            "InvalidRequest",
            400,
        ),
        (
            sigv4.UNSIGNED_PAYLOAD,
            {"content-length": "1", "x-amz-sdk-checksum-algorithm": "CRC32"},
            "InvalidRequest",
            400,
        ),
        (
            sigv4.UNSIGNED_PAYLOAD,
            {
                "content-length": "1",
                "x-amz-checksum-crc32": "AAAAAA==",
                "x-amz-sdk-checksum-algorithm": "SHA1",
            },
            "InvalidRequest",
            400,
        ),
        (
            sigv4.UNSIGNED_PAYLOAD,
            {"content-length": "1", "x-amz-trailer": "x-amz-checksum-crc32"},
            "InvalidRequest",
            400,
        ),
        (
            sigv4.STREAMING_UNSIGNED_TRAILER,
            {
                "content-length": "9",
                "x-amz-decoded-content-length": "1",
                "x-amz-trailer": "x-amz-meta-a",
            },
            "InvalidRequest",
            400,
        ),
    ],
    ids=[
        "no-length",
        "negative-length",
        "no-decoded-length",
        "aws-chunked-not-streaming",
        "bad-md5",
        "bad-checksum-value",
        "unknown-algorithm",
        "two-checksums",
        "sdk-algorithm-alone",
        "sdk-algorithm-differs",
        "trailer-not-streaming",
        "trailer-not-checksum",
    ],
)
def test_body_reader_refuses_bad_framing_headers(
    req_hash: str, headers: dict[str, str], code: str, status: int
) -> None:
    stream = RecordingStream(b"x")
    with pytest.raises(SignatureError) as caught:
        sigv4.body_reader(_request(req_hash), stream, headers=headers, signing_key=KEY)
    assert (caught.value.code, caught.value.status) == (code, status), caught.value.message
    assert stream.sizes == []  # refused before reading anything


def test_header_checksums_each_algorithm_and_mismatch() -> None:
    data = b"The quick brown fox jumps over the lazy dog" * 100
    for algorithm in chunked.CHECKSUMS:
        name = f"x-amz-checksum-{algorithm}"
        headers = {"content-length": str(len(data)), name: chunked.checksum(algorithm, data)}
        reader = _reader(_request(sigv4.UNSIGNED_PAYLOAD), data, headers)
        assert reader.read() == data
        assert reader.checksum == (name, headers[name])
        wrong = {**headers, name: chunked.checksum(algorithm, data[:-1])}
        _fails("BadDigest", _reader(_request(sigv4.UNSIGNED_PAYLOAD), data, wrong))


def test_checksum_algorithms_match_known_values() -> None:
    def value(algorithm: str, data: bytes) -> int:
        return int.from_bytes(base64.b64decode(chunked.checksum(algorithm, data)), "big")

    assert value("crc32", b"123456789") == 0xCBF43926
    assert value("crc32c", b"123456789") == 0xE3069283
    assert value("crc64nvme", b"123456789") == 0xAE8B14860A799888
    assert value("crc64nvme", bytes(32)) == 0xCF3473434D4ECF3B
    assert chunked.checksum("crc32c", b"a" * 66560) == "sOO8/Q=="  # the documented trailer
    assert chunked.checksum("sha1", b"") == base64.b64encode(hashlib.sha1(b"").digest()).decode()  # noqa: S324


def test_unsigned_chunks_framing_errors() -> None:
    req = _request(sigv4.STREAMING_UNSIGNED_TRAILER)

    def run(body: bytes, decoded: int = 5, **extra: str) -> Any:
        headers = {
            "transfer-encoding": "chunked",
            "x-amz-decoded-content-length": str(decoded),
            **extra,
        }
        return _reader(req, body, headers)

    assert run(b"5\r\nhello\r\n0\r\n\r\n").read() == b"hello"
    assert run(b"5\r\nhello\r\n0\r\n").read() == b"hello"  # a body that ends after the last chunk
    assert run(b"2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n").read() == b"hello"
    _fails("InvalidRequest", run(b"zz\r\nhello\r\n0\r\n\r\n"))
    _fails("InvalidRequest", run(b"5\r\nhelloXX0\r\n\r\n"))
    _fails("InvalidRequest", run(b"-5\r\nhello\r\n0\r\n\r\n"))
    _fails("InvalidRequest", run(b"6\r\nhello!\r\n0\r\n\r\n"))  # more than declared
    _fails("InvalidRequest", run(b"1" * 5000 + b"\r\n"))  # an endless chunk header
    _fails("IncompleteBody", run(b"5\r\nhel"))
    _fails("IncompleteBody", run(b"5\r\nhello\r\n"))
    _fails("IncompleteBody", run(b"3\r\nhel\r\n0\r\n\r\n"))  # fewer than declared
    _fails(
        "MalformedTrailerError",
        run(
            b"5\r\nhello\r\n0\r\nx-amz-checksum-crc32\r\n\r\n",
            **{"x-amz-trailer": "x-amz-checksum-crc32"},
        ),
    )
    _fails(
        "InvalidRequest",
        run(
            b"5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AA==\r\n\r\n",
            **{"x-amz-trailer": "x-amz-checksum-crc32"},
        ),
    )


# --- bounded reads ---------------------------------------------------------------------------


@pytest.mark.parametrize("read_size", [1, 7, 4096, 65_536, 1_000_000, 50 * 1024 * 1024])
def test_reader_never_returns_more_than_asked_and_reads_in_bounded_pieces(read_size: int) -> None:
    data = bytes(range(256)) * (12 * 1024 if read_size > 4096 else 256)  # 3 MiB, or 64 KiB
    body = _signed_chunks(
        data, SEED, 256 * 1024, ("x-amz-checksum-crc32", chunked.checksum("crc32", data))
    )
    stream = RecordingStream(body)
    headers = {
        "content-length": str(len(body)),
        "x-amz-decoded-content-length": str(len(data)),
        "x-amz-trailer": "x-amz-checksum-crc32",
    }
    reader = _reader(_request(sigv4.STREAMING_SIGNED_TRAILER, SEED), body, headers, stream)
    out = bytearray()
    while True:
        piece = reader.read(read_size)
        assert len(piece) <= read_size
        if not piece:
            break
        out += piece
    assert out == data
    assert all(size is not None and 0 < size <= chunked.READ_SIZE for size in stream.sizes)
    buffer = bytearray(3)
    assert reader.readinto(buffer) == 0


def test_plain_body_reads_are_bounded_too() -> None:
    data = b"z" * (5 * 1024 * 1024 + 3)
    stream = RecordingStream(data)
    headers = {"content-length": str(len(data))}
    reader = _reader(_request(hashlib.sha256(data).hexdigest()), data, headers, stream)
    buffer = bytearray(1 << 20)
    total = 0
    while count := reader.readinto(buffer):
        total += count
    assert total == len(data)
    assert max(s for s in stream.sizes if s is not None) <= chunked.READ_SIZE
    assert None not in stream.sizes and -1 not in stream.sizes


class GreedyStream(RecordingStream):
    """A stream that ignores the size asked and hands out 100 000 bytes at a time."""

    def read(self, size: int | None = -1) -> bytes:
        return super().read(100_000)


def test_a_stream_that_hands_out_too_much_still_decodes() -> None:
    data = bytes(range(256)) * 4096
    body = _signed_chunks(data, SEED, 65536)
    headers = {"content-length": str(len(body)), "x-amz-decoded-content-length": str(len(data))}
    reader = _reader(_request(sigv4.STREAMING_SIGNED, SEED), body, headers, GreedyStream(body))
    out = bytearray()
    while piece := reader.read(30_000):
        assert len(piece) <= 30_000
        out += piece
    assert out == data


def test_the_last_bytes_come_only_after_every_check() -> None:
    """A store that reads exactly the declared length and stops still never gets the whole of
    a tampered body."""
    data = b"q" * 200_000
    body = _signed_chunks(data, SEED, 65536)
    forged = body[:-68] + b"0" * 64 + body[-4:]  # the final chunk's signature
    headers = {"content-length": str(len(body)), "x-amz-decoded-content-length": str(len(data))}
    reader = _reader(_request(sigv4.STREAMING_SIGNED, SEED), forged, headers)
    got = 0
    with pytest.raises(SignatureError) as caught:
        while got < len(data):
            got += len(reader.read(len(data) - got))
    assert caught.value.code == "SignatureDoesNotMatch"
    assert got < len(data)

    plain = _reader(
        _request(hashlib.sha256(data).hexdigest()),
        data[:-1] + b"!",
        {"content-length": str(len(data))},
    )
    got = 0
    with pytest.raises(SignatureError):
        while got < len(data):
            got += len(plain.read(len(data) - got))
    assert got < len(data)


def test_empty_bodies() -> None:
    assert _reader(_request(sigv4.EMPTY_SHA256), b"", {"content-length": "0"}).read() == b""
    reader = _reader(
        _request(sigv4.STREAMING_SIGNED, SEED),
        _signed_chunks(b"", SEED, 10),
        {"transfer-encoding": "chunked", "x-amz-decoded-content-length": "0"},
    )
    assert reader.read() == b""
    _fails(
        "XAmzContentSHA256Mismatch",
        _reader(_request(sigv4.EMPTY_SHA256), b"x", {"content-length": "1"}),
    )


def test_stored_content_encoding_drops_aws_chunked() -> None:
    assert chunked.stored_content_encoding({"content-encoding": "gzip,aws-chunked"}) == "gzip"
    assert chunked.stored_content_encoding({"content-encoding": "aws-chunked"}) is None
    assert chunked.stored_content_encoding({}) is None
