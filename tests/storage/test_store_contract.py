"""The object-store contract: the same tests on both backends, the local folder (in a temp
folder) and S3 (against moto's real S3-protocol server), so switching backends is
configuration only."""

from __future__ import annotations

import hashlib
import io
import os
import random
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apps.storage.backends.local import LocalStore
from apps.storage.backends.s3 import S3Store
from apps.storage.base import (
    CHUNK_SIZE,
    BadDigest,
    EntityTooSmall,
    IncompleteBody,
    InvalidArgument,
    InvalidKey,
    InvalidPart,
    InvalidPartOrder,
    InvalidRange,
    NoSuchKey,
    NoSuchUpload,
    ObjectStore,
    StoreUnavailable,
)
from tests.livesrv import free_port
from tests.storage.motoserver import MotoServer

MiB = 1024 * 1024
EMPTY_MD5 = "d41d8cd98f00b204e9800998ecf8427e"


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


class Reader(io.RawIOBase):
    """A body that records how much each read asked for, and can fail after ``fail_after``
    bytes (as the /s3/ body reader does at EOF when a signature does not match)."""

    def __init__(self, data: bytes, fail_after: int | None = None) -> None:
        self.data = data
        self.pos = 0
        self.fail_after = fail_after
        self.asked: list[int] = []

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        self.asked.append(n)
        if self.fail_after is not None and self.pos >= self.fail_after:
            raise RuntimeError("XAmzContentSHA256Mismatch")
        end = len(self.data) if n < 0 else self.pos + n
        if self.fail_after is not None:
            end = min(end, self.fail_after)
        chunk = self.data[self.pos : end]
        self.pos += len(chunk)
        return chunk


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "local":
        backend: ObjectStore = LocalStore.from_config({"BACKEND": "local",
                                                       "ROOT": str(tmp_path / "objects")})
    else:
        moto: MotoServer = request.getfixturevalue("moto_server")
        backend = S3Store.from_config(moto.store_config(moto.new_bucket()))
    yield backend
    backend.close()


def keys_of(store: ObjectStore, prefix: str = "") -> list[str]:
    return [o.key for o in store.list(prefix).objects]


# --- objects ---------------------------------------------------------------------------------
def test_round_trip_of_bytes_and_of_an_empty_object(store: ObjectStore) -> None:
    data = bytes(range(256)) * 5
    info = store.put("user-1/bytes.bin", data)
    assert (info.key, info.size, info.etag) == ("user-1/bytes.bin", len(data), md5(data))
    body = store.get("user-1/bytes.bin")
    assert (body.start, body.length, body.info.size) == (0, len(data), len(data))
    assert body.read() == data

    empty = store.put("user-1/empty", b"")
    assert (empty.size, empty.etag) == (0, EMPTY_MD5)
    assert store.get("user-1/empty").read() == b""
    assert store.head("user-1/empty").size == 0


def test_bodies_stream_in_bounded_chunks_both_ways(store: ObjectStore) -> None:
    data = random.Random(1).randbytes(3 * CHUNK_SIZE + 123)
    reader = Reader(data)
    store.put("user-1/big", reader, length=len(data))
    assert max(reader.asked) <= CHUNK_SIZE  # never "read it all"
    body = store.get("user-1/big")
    chunks = list(body.chunks)
    assert len(chunks) >= 4 and max(map(len, chunks)) <= CHUNK_SIZE
    assert b"".join(chunks) == data


def test_a_put_larger_than_the_memory_spool_round_trips(store: ObjectStore) -> None:
    data = random.Random(2).randbytes(9 * MiB + 1)  # past the S3 backend's 8 MiB in memory
    info = store.put("user-1/large", io.BytesIO(data), content_type="video/mp4")
    assert (info.size, info.etag) == (len(data), md5(data))
    sha = hashlib.sha256()
    for chunk in store.get("user-1/large").chunks:
        sha.update(chunk)
    assert sha.digest() == hashlib.sha256(data).digest()


def test_keys_with_spaces_plus_unicode_and_a_key_beside_its_own_folder(
    store: ObjectStore,
) -> None:
    keys = [
        "user-1/a",
        "user-1/a/b",
        "user-1/a/",
        "user-1/A",
        "user-1/with space.txt",
        "user-1/a+b=c&d.txt",
        "user-1/照片 ü.png",
        "user-1/emoji 🎉/x",
        "user-1/%2e%2e/literal",
        "user-1/.../three dots",
        "user-1/" + "long-" * 60,  # one 300-byte segment
        "user-1/" + "长" * 300,  # 900 bytes of one segment
    ]
    for key in keys:
        store.put(key, key.encode())
    for key in keys:
        assert store.get(key).read() == key.encode()
        assert store.head(key).key == key
    assert keys_of(store, "user-1/") == sorted(keys, key=lambda k: k.encode())


def test_list_is_in_utf8_binary_order(store: ObjectStore) -> None:
    keys = ["k/a", "k/a-b", "k/a/b", "k/a0", "k/B", "k/é", "k/z", "k/~", "k/\U0001f600", "k/ä"]
    for key in keys:
        store.put(key, b"x")
    assert keys_of(store, "k/") == sorted(keys, key=lambda k: k.encode())


def test_ranges(store: ObjectStore) -> None:
    store.put("user-1/digits", b"0123456789")

    def fetch(start: int | None, end: int | None) -> tuple[int, int, int, bytes]:
        body = store.get("user-1/digits", start=start, end=end)
        return body.start, body.length, body.info.size, body.read()

    assert fetch(0, 3) == (0, 4, 10, b"0123")
    assert fetch(7, None) == (7, 3, 10, b"789")
    assert fetch(None, 3) == (7, 3, 10, b"789")  # the last three bytes
    assert fetch(8, 100) == (8, 2, 10, b"89")  # clamped to the object
    assert fetch(None, 20) == (0, 10, 10, b"0123456789")  # a suffix longer than the object
    assert fetch(9, 9) == (9, 1, 10, b"9")
    for start, end in [(10, None), (10, 20), (5, 2), (None, 0)]:
        with pytest.raises(InvalidRange):
            store.get("user-1/digits", start=start, end=end)
    store.put("user-1/nothing", b"")
    with pytest.raises(InvalidRange):
        store.get("user-1/nothing", start=0, end=None)


def test_head_gives_size_etag_content_type_and_metadata(store: ObjectStore) -> None:
    store.put("user-1/note.txt", b"hello", content_type="text/plain; charset=utf-8",
              metadata={"Origin": "upload", "name": "note"})
    info = store.head("user-1/note.txt")
    assert (info.size, info.etag, info.content_type) == (5, md5(b"hello"),
                                                        "text/plain; charset=utf-8")
    assert info.metadata == {"origin": "upload", "name": "note"}
    assert info.last_modified.utcoffset() is not None
    assert store.get("user-1/note.txt").info == info
    store.put("user-1/untyped", b"x")
    assert store.head("user-1/untyped").content_type == "application/octet-stream"
    for bad in [{"x": "é"}, {"é": "x"}, {"a b": "x"}, {"x": "line\nbreak"}]:
        with pytest.raises(InvalidArgument):
            store.put("user-1/bad-meta", b"x", metadata=bad)
    with pytest.raises(NoSuchKey):
        store.head("user-1/bad-meta")


def test_overwrite_replaces_body_type_and_metadata(store: ObjectStore) -> None:
    store.put("user-1/f", b"first", content_type="text/plain", metadata={"v": "1"})
    store.put("user-1/f", b"second!", content_type="image/png")
    info = store.head("user-1/f")
    assert (info.size, info.content_type, info.metadata) == (7, "image/png", {})
    assert store.get("user-1/f").read() == b"second!"
    assert keys_of(store) == ["user-1/f"]


def test_missing_keys(store: ObjectStore) -> None:
    with pytest.raises(NoSuchKey):
        store.get("user-1/nope")
    with pytest.raises(NoSuchKey):
        store.head("user-1/nope")
    with pytest.raises(NoSuchKey):
        store.copy("user-1/nope", "user-1/copy")
    store.delete("user-1/nope")  # not an error, as in S3
    store.put("user-1/there", b"x")
    store.delete("user-1/there")
    with pytest.raises(NoSuchKey):
        store.head("user-1/there")
    assert keys_of(store) == []


def test_delete_many_with_present_missing_and_bad_keys(store: ObjectStore) -> None:
    for key in ["user-1/a", "user-1/b", "user-1/c/d", "user-1/keep"]:
        store.put(key, b"x")
    failures = store.delete_many(["user-1/a", "user-1/missing", "user-1/c/d", "../x", "user-1/b"])
    assert [(f.key, f.code) for f in failures] == [("../x", "InvalidArgument")]
    assert keys_of(store) == ["user-1/keep"]


def test_list_with_delimiter_pages_and_start_after(store: ObjectStore) -> None:
    keys = [f"p/{i:02d}" for i in range(5)] + ["p/d1/x", "p/d1/y", "p/d2/z", "q", "p"]
    for key in keys:
        store.put(key, key.encode())

    page = store.list("p/", delimiter="/")
    assert [o.key for o in page.objects] == [f"p/{i:02d}" for i in range(5)]
    assert page.common_prefixes == ["p/d1/", "p/d2/"]
    assert (page.is_truncated, page.next_token) == (False, None)
    assert store.list("p/d", delimiter="/").common_prefixes == ["p/d1/", "p/d2/"]
    assert store.list("", delimiter="/").common_prefixes == ["p/"]
    assert [o.key for o in store.list("", delimiter="/").objects] == ["p", "q"]
    sizes = {o.key: o.size for o in store.list("p/d1/").objects}
    assert sizes == {"p/d1/x": 6, "p/d1/y": 6}

    objects: list[str] = []
    prefixes: list[str] = []
    token = None
    pages = 0
    while True:
        page = store.list("p/", delimiter="/", max_keys=2, continuation_token=token)
        pages += 1
        assert len(page.objects) + len(page.common_prefixes) <= 2
        objects += [o.key for o in page.objects]
        prefixes += page.common_prefixes
        if not page.is_truncated:
            assert page.next_token is None
            break
        token = page.next_token
        assert token
    assert pages == 4
    assert objects == [f"p/{i:02d}" for i in range(5)]
    assert prefixes == ["p/d1/", "p/d2/"]

    after = store.list("p/", start_after="p/02")
    assert [o.key for o in after.objects] == ["p/03", "p/04", "p/d1/x", "p/d1/y", "p/d2/z"]
    first = store.list("", max_keys=3)
    assert [o.key for o in first.objects] == ["p", "p/00", "p/01"] and first.is_truncated
    rest = store.list("", max_keys=1000, continuation_token=first.next_token)
    assert [o.key for o in rest.objects] == sorted(keys)[3:]
    assert store.list("nothing/").objects == []


def test_copy_keeps_or_replaces_metadata(store: ObjectStore) -> None:
    store.put("user-1/src", b"payload", content_type="text/plain", metadata={"a": "1"})
    kept = store.copy("user-1/src", "user-1/kept")
    assert (kept.size, kept.etag, kept.content_type, kept.metadata) == (
        7, md5(b"payload"), "text/plain", {"a": "1"})
    new_meta = store.copy("user-1/src", "user-1/meta", metadata={"B": "2"})
    assert (new_meta.content_type, new_meta.metadata) == ("text/plain", {"b": "2"})
    new_type = store.copy("user-1/src", "user-1/type", content_type="application/json")
    assert (new_type.content_type, new_type.metadata) == ("application/json", {"a": "1"})
    for key in ["user-1/kept", "user-1/meta", "user-1/type"]:
        assert store.get(key).read() == b"payload"
        assert store.head(key) == store.get(key).info
    assert store.get("user-1/src").read() == b"payload"
    onto_itself = store.copy("user-1/src", "user-1/src")
    assert (onto_itself.etag, onto_itself.content_type, onto_itself.metadata) == (
        md5(b"payload"), "text/plain", {"a": "1"})


# --- multipart -------------------------------------------------------------------------------
def test_multipart_upload_of_16_mib_in_three_parts(store: ObjectStore) -> None:
    data = random.Random(7).randbytes(16 * MiB + 5)
    cuts = [(0, 6 * MiB), (6 * MiB, 12 * MiB), (12 * MiB, len(data))]
    key = "user-1/big file ü.bin"
    upload = store.create_multipart(key, content_type="application/x-test",
                                    metadata={"sha": "yes"})
    etags = []
    for number, (a, b) in enumerate(cuts, start=1):
        reader = Reader(data[a:b])
        etags.append(store.upload_part(key, upload, number, reader, length=b - a))
        assert max(reader.asked) <= CHUNK_SIZE
    assert etags == [md5(data[a:b]) for a, b in cuts]
    assert [(p.part_number, p.etag, p.size) for p in store.list_parts(key, upload)] == [
        (n, etags[n - 1], b - a) for n, (a, b) in enumerate(cuts, start=1)]
    with pytest.raises(NoSuchKey):
        store.head(key)  # nothing visible before complete

    with pytest.raises(InvalidPart):
        store.complete_multipart(key, upload, [(1, etags[0]), (2, "0" * 32), (3, etags[2])])
    with pytest.raises(InvalidPartOrder):
        store.complete_multipart(key, upload, [(2, etags[1]), (1, etags[0]), (3, etags[2])])
    with pytest.raises(InvalidPart):
        store.complete_multipart(key, upload, [(1, etags[0]), (4, etags[2])])

    info = store.complete_multipart(key, upload, [(n, f'"{e}"') for n, e in enumerate(etags, 1)])
    expected = hashlib.md5(b"".join(bytes.fromhex(e) for e in etags), usedforsecurity=False)
    assert info.etag == f"{expected.hexdigest()}-3"
    assert (info.size, info.content_type, info.metadata) == (
        len(data), "application/x-test", {"sha": "yes"})
    assert store.head(key) == info

    sha = hashlib.sha256()
    body = store.get(key)
    for chunk in body.chunks:
        assert len(chunk) <= CHUNK_SIZE
        sha.update(chunk)
    assert sha.hexdigest() == hashlib.sha256(data).hexdigest()
    assert store.get(key, start=6 * MiB - 2, end=6 * MiB + 1).read() == data[6 * MiB - 2 :
                                                                             6 * MiB + 2]
    with pytest.raises(NoSuchUpload):
        store.list_parts(key, upload)  # completed uploads are gone


def test_small_parts_other_than_the_last_are_refused(store: ObjectStore) -> None:
    upload = store.create_multipart("user-1/m")
    one = store.upload_part("user-1/m", upload, 1, b"a" * 1000)
    two = store.upload_part("user-1/m", upload, 2, b"b" * 1000)
    with pytest.raises(EntityTooSmall):
        store.complete_multipart("user-1/m", upload, [(1, one), (2, two)])
    info = store.complete_multipart("user-1/m", upload, [(1, one)])  # a single last part is fine
    assert (info.size, store.get("user-1/m").read()) == (1000, b"a" * 1000)


def test_abort_then_list_parts_is_no_such_upload(store: ObjectStore) -> None:
    upload = store.create_multipart("user-1/aborted")
    store.upload_part("user-1/aborted", upload, 1, b"part")
    store.abort_multipart("user-1/aborted", upload)
    with pytest.raises(NoSuchUpload):
        store.list_parts("user-1/aborted", upload)
    if isinstance(store, LocalStore):  # moto answers these two with a 500 (S3: NoSuchUpload)
        with pytest.raises(NoSuchUpload):
            store.upload_part("user-1/aborted", upload, 2, b"late")
        with pytest.raises(NoSuchUpload):
            store.complete_multipart("user-1/aborted", upload, [(1, md5(b"part"))])
    with pytest.raises(NoSuchUpload):
        store.list_parts("user-1/aborted", "not-an-upload-id")
    with pytest.raises(NoSuchKey):
        store.head("user-1/aborted")


def test_reuploading_a_part_replaces_it(store: ObjectStore) -> None:
    upload = store.create_multipart("user-1/re")
    store.upload_part("user-1/re", upload, 1, b"old")
    etag = store.upload_part("user-1/re", upload, 1, b"new!")
    assert [(p.part_number, p.size, p.etag) for p in store.list_parts("user-1/re", upload)] == [
        (1, 4, md5(b"new!"))]
    store.complete_multipart("user-1/re", upload, [(1, etag)])
    assert store.get("user-1/re").read() == b"new!"


# --- bodies that fail ------------------------------------------------------------------------
def test_a_body_that_raises_mid_read_stores_nothing_and_keeps_the_old_object(
    store: ObjectStore,
) -> None:
    data = random.Random(3).randbytes(2 * CHUNK_SIZE + 10)
    store.put("user-1/kept", b"old body", content_type="text/plain")
    with pytest.raises(RuntimeError, match="XAmzContentSHA256Mismatch"):
        store.put("user-1/kept", Reader(data, fail_after=CHUNK_SIZE + 5), length=len(data))
    assert store.get("user-1/kept").read() == b"old body"
    assert store.head("user-1/kept").content_type == "text/plain"
    with pytest.raises(RuntimeError):
        store.put("user-1/new", Reader(data, fail_after=len(data)))  # fails only at EOF
    with pytest.raises(NoSuchKey):
        store.head("user-1/new")

    upload = store.create_multipart("user-1/parts")
    with pytest.raises(RuntimeError):
        store.upload_part("user-1/parts", upload, 1, Reader(data, fail_after=100))
    assert store.list_parts("user-1/parts", upload) == []
    assert keys_of(store) == ["user-1/kept"]


def test_content_md5_and_short_bodies(store: ObjectStore) -> None:
    import base64

    good = base64.b64encode(hashlib.md5(b"abc", usedforsecurity=False).digest()).decode()
    assert store.put("user-1/md5", b"abc", content_md5=good).etag == md5(b"abc")
    wrong = base64.b64encode(hashlib.md5(b"abd", usedforsecurity=False).digest()).decode()
    with pytest.raises(BadDigest):
        store.put("user-1/md5", b"xyz", content_md5=wrong)
    with pytest.raises(BadDigest):
        store.put("user-1/other", b"xyz", content_md5="not base64!")
    with pytest.raises(IncompleteBody):
        store.put("user-1/short", io.BytesIO(b"12345"), length=10)
    assert store.get("user-1/md5").read() == b"abc"
    assert keys_of(store) == ["user-1/md5"]


BAD_KEYS = ["", "../x", "user-1/../x", "user-1/..", "a\\b", "user-1/a\x00b", "user-1/new\nline",
            "user-1/\x7f", "/abs", "user-1/" + "x" * 1018, "user-1/" + "é" * 509]


def test_bad_keys_are_refused_and_nothing_is_written(store: ObjectStore) -> None:
    store.put("user-1/source", b"x")
    for key in BAD_KEYS:
        for call in [
            lambda k: store.put(k, b"data"),
            lambda k: store.get(k),
            lambda k: store.head(k),
            lambda k: store.delete(k),
            lambda k: store.copy("user-1/source", k),
            lambda k: store.copy(k, "user-1/dest"),
            lambda k: store.create_multipart(k),
            lambda k: store.presign_put(k, expires_in=60),
        ]:
            with pytest.raises(InvalidKey):
                call(key)
    assert len(("user-1/" + "é" * 508).encode()) == 1023
    store.put("user-1/" + "é" * 508, b"fits")  # 1023 bytes is fine
    assert keys_of(store) == ["user-1/source", "user-1/" + "é" * 508]


def test_concurrent_writers_never_expose_a_partial_object(store: ObjectStore) -> None:
    size = CHUNK_SIZE + 1000
    errors: list[BaseException] = []
    seen: list[bytes] = []
    store.put("user-1/race", bytes([0]) * size)

    def write(value: int) -> None:
        try:
            for _ in range(3):
                store.put("user-1/race", Reader(bytes([value]) * size))
        except BaseException as exc:  # reported below
            errors.append(exc)

    def read() -> None:
        try:
            for _ in range(10):
                seen.append(store.get("user-1/race").read())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(v,)) for v in range(1, 5)]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    final = store.get("user-1/race").read()
    for body in [*seen, final]:
        assert len(body) == size and len(set(body)) == 1
    assert final[0] in {1, 2, 3, 4}


# --- URLs and health -------------------------------------------------------------------------
@pytest.fixture
def http_store(request: pytest.FixtureRequest, tmp_path: Path, settings: Any) -> ObjectStore:
    """A store whose presigned URLs a plain HTTP client can use: S3 on moto, or the local
    folder served by this project's /s3/ on a live Daphne sharing its folder."""
    if request.param == "s3":
        moto: MotoServer = request.getfixturevalue("moto_server")
        return S3Store.from_config(moto.store_config(moto.new_bucket()))
    server = request.getfixturevalue("web")
    settings.RTC_PUBLIC_URL = server.http_url
    return LocalStore(Path(settings.VAR_DIR) / "objects")


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.livesrv import start_daphne

    server = start_daphne(tmp_path_factory.mktemp("web"))
    yield server
    server.stop()


def http(method: str, url: str, data: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A plain HTTP request (no AWS library): (status, body)."""
    request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 test servers
        url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize("http_store", ["local", "s3"], indirect=True)
def test_presigned_get_and_put_work_with_plain_http(http_store: ObjectStore) -> None:
    key = "user-presign/hello world ü+.txt"
    http_store.put(key, b"presigned body", content_type="text/plain")
    assert http("GET", http_store.presign_get(key, expires_in=300)) == (200, b"presigned body")

    json_type = {"Content-Type": "application/json"}
    put_url = http_store.presign_put("user-presign/up.json", expires_in=300,
                                     content_type="application/json")
    assert http("PUT", put_url, b'{"a": 1}', json_type)[0] == 200
    info = http_store.head("user-presign/up.json")
    assert (info.content_type, http_store.get("user-presign/up.json").read()) == (
        "application/json", b'{"a": 1}')

    if isinstance(http_store, LocalStore):  # moto does not verify signatures; our /s3/ does
        forged = put_url.replace("up.json", "other.json")
        assert http("PUT", forged, b"x", json_type)[0] == 403
        with pytest.raises(NoSuchKey):
            http_store.head("user-presign/other.json")


def test_health_passes_on_a_working_store(store: ObjectStore) -> None:
    store.health()


def test_health_and_calls_fail_as_unavailable(moto_server: MotoServer, tmp_path: Path) -> None:
    closed = S3Store.from_config({**moto_server.store_config("rtc-test-1"),
                                  "ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"})
    with pytest.raises(StoreUnavailable):
        closed.health()
    with pytest.raises(StoreUnavailable):
        closed.head("user-1/x")  # every call, not only the probe
    missing = S3Store.from_config(moto_server.store_config("no-such-bucket"))
    with pytest.raises(StoreUnavailable):
        missing.health()
    with pytest.raises(StoreUnavailable):
        missing.put("user-1/x", b"x")
    gone = LocalStore(tmp_path / "gone")
    os.rename(tmp_path / "gone", tmp_path / "moved")
    with pytest.raises(StoreUnavailable):
        gone.health()


@pytest.mark.django_db
def test_readyz_probes_the_configured_store(
    client: Any, settings: Any, moto_server: MotoServer, tmp_path: Path
) -> None:
    from apps.storage.store import get_store, reset_store

    settings.RTC_OBJECT_STORE = {"BACKEND": "local", "ROOT": str(tmp_path / "objects")}
    reset_store()
    try:
        assert client.get("/readyz").json()["objects"] == "ok"
        assert isinstance(get_store(), LocalStore)
        settings.RTC_OBJECT_STORE = {**moto_server.store_config("rtc-test-none"),
                                     "ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
        reset_store()
        answer = client.get("/readyz")
        assert (answer.status_code, answer.json()["objects"]) == (503, "unavailable")
        settings.RTC_OBJECT_STORE = moto_server.store_config(moto_server.new_bucket())
        reset_store()
        assert client.get("/readyz").json()["objects"] == "ok"
    finally:
        reset_store()


# --- the local folder only -------------------------------------------------------------------
def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


def test_local_layout_holds_a_key_beside_its_folder_and_both_cases(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    store = LocalStore(root)
    long_key = "user-1/" + "é" * 200  # 400 bytes, 1200 encoded: split over several names
    for key in ["user-1/a", "user-1/a/b", "user-1/A", "user-1/x y+z", long_key]:
        store.put(key, key.encode())
    files = files_under(root)
    assert {"keys/user-1.d/a.o", "keys/user-1.d/a.d/b.o", "keys/user-1.d/^a.o",
            "keys/user-1.d/x%20y%2Bz.o"} <= set(files)
    assert all(len(part.encode()) <= 255 for f in files for part in Path(f).parts)
    # An object file is its body, then the trailer: the body is readable with plain tools.
    assert (root / "keys/user-1.d/a.d/b.o").read_bytes().startswith(b"user-1/a/b{")
    reopened = LocalStore(root)  # nothing lives in memory
    assert keys_of(reopened) == sorted(
        ["user-1/a", "user-1/a/b", "user-1/A", "user-1/x y+z", long_key], key=str.encode)
    assert reopened.get(long_key).read() == long_key.encode()
    for key in keys_of(reopened):
        reopened.delete(key)
    assert files_under(root / "keys") == [] and list((root / "keys").iterdir()) == []


def test_local_keys_never_reach_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "objects"
    store = LocalStore(root)
    for key in [*BAD_KEYS, "../../outside", "user-1/../../../outside", "..\\outside"]:
        with pytest.raises(InvalidKey):
            store.put(key, b"x")
    odd = ["user-1/./x", "user-1/.../x", "user-1/%2e%2e/x", "user-1/ ../x", "user-1/..x",
           "user-1/x..", "user-1//x", "user-1/~/.ssh/authorized_keys", "user-1/.tmp", "user-1/"]
    for key in odd:
        store.put(key, key.encode())
    assert keys_of(store) == sorted(odd, key=str.encode)
    written = [p.resolve() for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) == len(odd)
    assert all(p.is_relative_to((root / "keys").resolve()) for p in written)


def test_local_failed_writes_leave_no_temp_files(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    store = LocalStore(root)
    with pytest.raises(RuntimeError):
        store.put("user-1/x", Reader(b"x" * 1000, fail_after=500))
    with pytest.raises(BadDigest):
        store.put("user-1/x", b"abc", content_md5="AAAAAAAAAAAAAAAAAAAAAA==")
    upload = store.create_multipart("user-1/m")
    with pytest.raises(RuntimeError):
        store.upload_part("user-1/m", upload, 1, Reader(b"x" * 1000, fail_after=10))
    store.abort_multipart("user-1/m", upload)
    assert files_under(root) == []


def test_local_body_closed_unread_releases_its_file(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "objects")
    store.put("user-1/x", b"x" * 10)
    before = len(os.listdir("/proc/self/fd"))
    bodies = [store.get("user-1/x") for _ in range(5)]
    assert len(os.listdir("/proc/self/fd")) == before + 5
    for body in bodies:
        body.close()
    assert len(os.listdir("/proc/self/fd")) == before
