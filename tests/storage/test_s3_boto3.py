"""Unmodified boto3 against the live ``/s3/`` with temporary credentials: over HTTPS (boto3's
default aws-chunked uploads with CRC32 trailers) and HTTP (signed payloads), on the local
backend and on the S3 backend (moto's server)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from tests.storage.motoserver import MotoServer
from tests.storage.s3_live import (
    BUCKET,
    S3Server,
    error_code,
    login,
    s3_client,
    start_s3_server,
    temporary_credentials,
)

pytestmark = [pytest.mark.django_db(transaction=True)]

MiB = 1024 * 1024
ODD_NAMES = ["a file with spaces.txt", "plus+sign+.txt", "ünïcødé 文件 ✓.txt", "dir/nested/x.bin"]


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_s3_server(tmp_path_factory.mktemp("web-tls"), tls=True)
    yield server
    server.stop()


@pytest.fixture
def user_s3(web: S3Server, make_user: Any) -> tuple[Any, str]:
    """(boto3 client, prefix) of a new user."""
    creds = temporary_credentials(web, login(make_user()))
    return s3_client(web, creds), creds["prefix"]


def meta(response: dict) -> dict[str, str]:
    """User metadata, names lower-cased: which case boto3 reports depends on the web server
    (uvicorn sends header names in lower case, Daphne capitalised; docs/storage.md)."""
    return {name.lower(): value for name, value in response["Metadata"].items()}


def keys_under(s3: Any, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


def round_trip(s3: Any, prefix: str) -> None:
    """What every backend and transport must do alike."""
    for name in ODD_NAMES:
        key = prefix + name
        put = s3.put_object(Bucket=BUCKET, Key=key, Body=name.encode() * 3,
                            ContentType="text/plain", Metadata={"origin": "test"})
        assert put["ETag"] == f'"{hashlib.md5(name.encode() * 3).hexdigest()}"'  # noqa: S324
        got = s3.get_object(Bucket=BUCKET, Key=key)
        assert got["Body"].read() == name.encode() * 3
        assert got["ContentType"] == "text/plain"
        assert meta(got) == {"origin": "test"}
    assert keys_under(s3, prefix) == sorted(prefix + n for n in ODD_NAMES)

    key = prefix + ODD_NAMES[2]
    body = ODD_NAMES[2].encode() * 3
    part = s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=2-9")
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert part["ContentRange"] == f"bytes 2-9/{len(body)}"
    assert part["Body"].read() == body[2:10]
    assert s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=-4")["Body"].read() == body[-4:]
    assert s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=5-")["Body"].read() == body[5:]
    head = s3.head_object(Bucket=BUCKET, Key=key)
    assert head["ContentLength"] == len(body) and meta(head) == {"origin": "test"}

    s3.copy_object(Bucket=BUCKET, Key=prefix + "copy.txt",
                   CopySource={"Bucket": BUCKET, "Key": key})
    assert s3.get_object(Bucket=BUCKET, Key=prefix + "copy.txt")["Body"].read() == body

    deleted = s3.delete_objects(Bucket=BUCKET, Delete={
        "Objects": [{"Key": prefix + n} for n in ODD_NAMES] + [{"Key": prefix + "copy.txt"}]})
    assert sorted(d["Key"] for d in deleted["Deleted"]) == sorted(
        [prefix + n for n in ODD_NAMES] + [prefix + "copy.txt"])
    assert keys_under(s3, prefix) == []


def multipart_round_trip(s3: Any, prefix: str, folder: Any) -> None:
    """A 3-part upload of 18 MiB by boto3's transfer manager, checked by SHA-256."""
    data = os.urandom(18 * MiB)
    source = folder / "big.bin"
    source.write_bytes(data)
    config = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=6 * MiB)
    s3.upload_file(str(source), BUCKET, prefix + "big.bin", Config=config)
    head = s3.head_object(Bucket=BUCKET, Key=prefix + "big.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].strip('"').endswith("-3")
    target = folder / "back.bin"
    s3.download_file(BUCKET, prefix + "big.bin", str(target))
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(data).digest()


def test_round_trip_over_https(user_s3) -> None:
    round_trip(*user_s3)


def test_multipart_upload_over_https(user_s3, tmp_path) -> None:
    multipart_round_trip(*user_s3, tmp_path)


def test_list_v2_pages_delimits_and_starts_after(user_s3) -> None:
    s3, prefix = user_s3
    names = ["a", "b", "c", "d/1", "d/2", "e", "f/1"]
    for name in names:
        s3.put_object(Bucket=BUCKET, Key=prefix + name, Body=b"x")
    pages = list(s3.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=prefix, PaginationConfig={"PageSize": 2}))
    assert len(pages) == 4
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == [prefix + n for n in names]
    top = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix, Delimiter="/")
    assert [o["Key"] for o in top["Contents"]] == [prefix + n for n in ("a", "b", "c", "e")]
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == [prefix + "d/", prefix + "f/"]
    assert top["KeyCount"] == 6
    after = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix, StartAfter=prefix + "d/1")
    assert [o["Key"] for o in after["Contents"]] == [prefix + n for n in ("d/2", "e", "f/1")]
    v1 = s3.list_objects(Bucket=BUCKET, Prefix=prefix, Delimiter="/", MaxKeys=3)
    assert v1["IsTruncated"] and [o["Key"] for o in v1["Contents"]] == [
        prefix + n for n in ("a", "b", "c")]
    rest = s3.list_objects(Bucket=BUCKET, Prefix=prefix, Delimiter="/", Marker=v1["NextMarker"])
    assert [p["Prefix"] for p in rest["CommonPrefixes"]] == [prefix + "d/", prefix + "f/"]


def test_copy_keeps_or_replaces_metadata(user_s3) -> None:
    s3, prefix = user_s3
    s3.put_object(Bucket=BUCKET, Key=prefix + "src", Body=b"body", ContentType="text/csv",
                  Metadata={"a": "1"})
    source = {"Bucket": BUCKET, "Key": prefix + "src"}
    s3.copy_object(Bucket=BUCKET, Key=prefix + "kept", CopySource=source)
    kept = s3.head_object(Bucket=BUCKET, Key=prefix + "kept")
    assert (kept["ContentType"], meta(kept)) == ("text/csv", {"a": "1"})
    s3.copy_object(Bucket=BUCKET, Key=prefix + "new", CopySource=source,
                   MetadataDirective="REPLACE", ContentType="text/plain", Metadata={"b": "2"})
    new = s3.head_object(Bucket=BUCKET, Key=prefix + "new")
    assert (new["ContentType"], meta(new)) == ("text/plain", {"b": "2"})
    with pytest.raises(ClientError) as refused:
        s3.copy_object(Bucket=BUCKET, Key=prefix + "src", CopySource=source)
    assert error_code(refused.value) == "InvalidRequest"


def test_delete_many_quietly_reports_only_errors(user_s3, make_user) -> None:
    s3, prefix = user_s3
    for name in ("1", "2"):
        s3.put_object(Bucket=BUCKET, Key=prefix + name, Body=b"x")
    other = f"user-{make_user().pk}/theirs"
    answer = s3.delete_objects(Bucket=BUCKET, Delete={"Quiet": True, "Objects": [
        {"Key": prefix + "1"}, {"Key": prefix + "2"}, {"Key": prefix + "missing"},
        {"Key": other}, {"Key": prefix + "../x"}]})
    assert "Deleted" not in answer
    assert [(e["Key"], e["Code"]) for e in answer["Errors"]] == [
        (other, "AccessDenied"), (prefix + "../x", "InvalidArgument")]
    assert keys_under(s3, prefix) == []


def test_multipart_parts_can_be_listed_and_aborted(user_s3) -> None:
    s3, prefix = user_s3
    key = prefix + "parts.bin"
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    etags = [s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=n,
                            Body=bytes([n]) * (5 * MiB if n == 1 else 10))["ETag"]
             for n in (1, 2)]
    parts = s3.list_parts(Bucket=BUCKET, Key=key, UploadId=upload)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in parts] == [
        (1, etags[0], 5 * MiB), (2, etags[1], 10)]
    s3.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload)
    with pytest.raises(ClientError) as gone:
        s3.list_parts(Bucket=BUCKET, Key=key, UploadId=upload)
    assert error_code(gone.value) == "NoSuchUpload"
    assert keys_under(s3, prefix) == []


def test_complete_checks_parts(user_s3) -> None:
    s3, prefix = user_s3
    key = prefix + "small-parts.bin"
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    etags = [s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=n,
                            Body=b"tiny")["ETag"] for n in (1, 2)]
    for parts, code in [
        ([{"PartNumber": 1, "ETag": etags[0]}, {"PartNumber": 2, "ETag": etags[1]}],
         "EntityTooSmall"),
        ([{"PartNumber": 2, "ETag": etags[1]}, {"PartNumber": 1, "ETag": etags[0]}],
         "InvalidPartOrder"),
        ([{"PartNumber": 1, "ETag": '"0000"'}], "InvalidPart"),
    ]:
        with pytest.raises(ClientError) as refused:
            s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload,
                                         MultipartUpload={"Parts": parts})
        assert error_code(refused.value) == code
    assert keys_under(s3, prefix) == []


def test_errors_are_s3_errors(user_s3, web) -> None:
    s3, prefix = user_s3
    s3.put_object(Bucket=BUCKET, Key=prefix + "here", Body=b"0123456789")
    cases = [
        (lambda: s3.get_object(Bucket=BUCKET, Key=prefix + "missing"), "NoSuchKey"),
        (lambda: s3.head_object(Bucket=BUCKET, Key=prefix + "missing"), "404"),
        (lambda: s3.get_object(Bucket="another-bucket", Key=prefix + "here"), "NoSuchBucket"),
        (lambda: s3.get_object(Bucket=BUCKET, Key=prefix + "here", Range="bytes=50-60"),
         "InvalidRange"),
        (lambda: s3.get_object_acl(Bucket=BUCKET, Key=prefix + "here"), "NotImplemented"),
        (lambda: s3.put_bucket_versioning(
            Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"}), "NotImplemented"),
        (lambda: s3.list_objects_v2(Bucket=BUCKET), "AccessDenied"),
        (lambda: s3.get_object(Bucket=BUCKET, Key=prefix + "here", IfNoneMatch="*"), "304"),
        (lambda: s3.get_object(Bucket=BUCKET, Key=prefix + "here", IfMatch='"nope"'),
         "PreconditionFailed"),
    ]
    for call, code in cases:
        with pytest.raises(ClientError) as refused:
            call()
        assert error_code(refused.value) == code
        assert refused.value.response["ResponseMetadata"]["RequestId"]
    assert s3.list_buckets()["Buckets"][0]["Name"] == BUCKET
    assert s3.head_bucket(Bucket=BUCKET)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert s3.get_bucket_location(Bucket=BUCKET)["LocationConstraint"] is None


# --- plain HTTP: signed payloads -------------------------------------------------------------


@pytest.fixture(scope="module")
def web_http(django_db_setup: Any, django_db_blocker: Any,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_s3_server(tmp_path_factory.mktemp("web-http"), tls=False)
    yield server
    server.stop()


def test_round_trip_over_http(web_http, make_user, tmp_path) -> None:
    creds = temporary_credentials(web_http, login(make_user()))
    s3 = s3_client(web_http, creds)
    round_trip(s3, creds["prefix"])
    multipart_round_trip(s3, creds["prefix"], tmp_path)


# --- the S3 backend --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def web_on_moto(django_db_setup: Any, django_db_blocker: Any, moto_server: MotoServer,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Server, Any]]:
    import boto3

    bucket = moto_server.new_bucket()
    server = start_s3_server(tmp_path_factory.mktemp("web-moto"), tls=True,
                             **moto_server.env(bucket))
    direct = boto3.client("s3", endpoint_url=moto_server.endpoint_url, region_name="us-east-1",
                          aws_access_key_id="moto-access-key",
                          aws_secret_access_key="moto-secret-key")
    yield server, (direct, bucket)
    server.stop()


def test_round_trip_on_the_s3_backend(web_on_moto, make_user, tmp_path) -> None:
    server, (direct, bucket) = web_on_moto
    creds = temporary_credentials(server, login(make_user()))
    s3 = s3_client(server, creds)
    round_trip(s3, creds["prefix"])
    multipart_round_trip(s3, creds["prefix"], tmp_path)
    # the objects are in the configured bucket, under the user's prefix
    stored = direct.list_objects_v2(Bucket=bucket, Prefix=creds["prefix"])["Contents"]
    assert [o["Key"] for o in stored] == [creds["prefix"] + "big.bin"]
