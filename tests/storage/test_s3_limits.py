"""The limits of ``/s3/`` with their S3 errors, on a server started with small ones: object size
(``EntityTooLarge``), parts, the per-user quota (``QuotaExceeded``) and request rate
(``SlowDown``). Every refusal leaves the store as it was."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from rtcagent import keys
from tests.storage.s3_live import (
    BUCKET,
    S3Server,
    error_code,
    login,
    presigned_url,
    s3_client,
    start_s3_server,
    temporary_credentials,
)

pytestmark = [pytest.mark.django_db(transaction=True)]

RATE = 20
QUOTA = 64 * 1024
MAX_OBJECT = 40_000
NO_RETRIES = {"retries": {"max_attempts": 1, "mode": "standard"}}


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_s3_server(
        tmp_path_factory.mktemp("web-limits"), tls=True,
        RTC_S3_REQUESTS_PER_MINUTE=str(RATE), RTC_S3_USER_QUOTA_BYTES=str(QUOTA),
        RTC_S3_MAX_OBJECT_BYTES=str(MAX_OBJECT))
    yield server
    server.stop()


@pytest.fixture
def person(web: S3Server, make_user: Any) -> tuple[Any, str, str]:
    """(boto3 client without retries, prefix, access token) of a new user."""
    token = login(make_user())
    creds = temporary_credentials(web, token)
    return s3_client(web, creds, **NO_RETRIES), creds["prefix"], token


def stored(prefix: str) -> dict[str, int]:
    from apps.storage.store import get_store

    return {o.key: o.size for o in get_store().list(prefix).objects}


def refused(call: Any) -> str:
    with pytest.raises(ClientError) as caught:
        call()
    return error_code(caught.value)


def test_an_object_over_the_size_limit_is_too_large(person) -> None:
    s3, prefix, _ = person
    assert refused(lambda: s3.put_object(Bucket=BUCKET, Key=prefix + "big",
                                         Body=b"x" * (MAX_OBJECT + 1))) == "EntityTooLarge"
    assert stored(prefix) == {}
    s3.put_object(Bucket=BUCKET, Key=prefix + "big", Body=b"x" * MAX_OBJECT)
    assert stored(prefix) == {prefix + "big": MAX_OBJECT}


def test_a_presigned_put_over_the_size_limit_is_too_large(web, person) -> None:
    _, prefix, token = person
    url = presigned_url(web, token, "put", prefix + "big")
    request = urllib.request.Request(url, data=b"x" * (MAX_OBJECT + 1), method="PUT")  # noqa: S310
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=20, context=web.ssl_context())  # noqa: S310
    assert caught.value.code == 400
    assert b"<Code>EntityTooLarge</Code>" in caught.value.read()
    assert stored(prefix) == {}


def test_parts_are_held_to_the_object_limit_and_numbered_1_to_10000(person) -> None:
    s3, prefix, _ = person
    key = prefix + "parts"
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=b"a" * 30_000)
    assert refused(lambda: s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=2,
                                          Body=b"b" * 20_000)) == "EntityTooLarge"
    for number in (0, 10001):
        assert refused(lambda n=number: s3.upload_part(
            Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=n, Body=b"c")) in (
            "InvalidArgument",)
    parts = s3.list_parts(Bucket=BUCKET, Key=key, UploadId=upload)["Parts"]
    assert [p["PartNumber"] for p in parts] == [1]
    s3.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload)
    assert stored(prefix) == {}


def test_the_quota_counts_every_write_and_frees_on_delete(person, redis_client) -> None:
    s3, prefix, _ = person
    s3.put_object(Bucket=BUCKET, Key=prefix + "a", Body=b"a" * 30_000)
    s3.put_object(Bucket=BUCKET, Key=prefix + "b", Body=b"b" * 30_000)
    assert refused(lambda: s3.put_object(Bucket=BUCKET, Key=prefix + "c",
                                         Body=b"c" * 10_000)) == "QuotaExceeded"
    assert refused(lambda: s3.copy_object(Bucket=BUCKET, Key=prefix + "a2", CopySource={
        "Bucket": BUCKET, "Key": prefix + "a"})) == "QuotaExceeded"
    assert stored(prefix) == {prefix + "a": 30_000, prefix + "b": 30_000}
    # replacing an object counts only the difference: 65 000 of 65 536 bytes
    s3.put_object(Bucket=BUCKET, Key=prefix + "a", Body=b"A" * 35_000)
    # the cached figure is rebuilt from the store when Redis lost it
    redis_client.delete(keys.s3_usage(int(prefix.removeprefix("user-").rstrip("/"))))
    assert refused(lambda: s3.put_object(Bucket=BUCKET, Key=prefix + "c",
                                         Body=b"c" * 1_000)) == "QuotaExceeded"
    s3.delete_object(Bucket=BUCKET, Key=prefix + "b")
    s3.put_object(Bucket=BUCKET, Key=prefix + "c", Body=b"c" * 10_000)
    assert stored(prefix) == {prefix + "a": 35_000, prefix + "c": 10_000}


def test_the_quota_refuses_a_multipart_upload_that_would_not_fit(person) -> None:
    s3, prefix, _ = person
    s3.put_object(Bucket=BUCKET, Key=prefix + "a", Body=b"a" * 39_000)
    s3.put_object(Bucket=BUCKET, Key=prefix + "b", Body=b"b" * 20_000)
    key = prefix + "parts"
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    assert refused(lambda: s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1,
                                          Body=b"p" * 8_000)) == "QuotaExceeded"
    assert s3.list_parts(Bucket=BUCKET, Key=key, UploadId=upload).get("Parts", []) == []


def test_too_many_requests_slow_down(web, person, make_user) -> None:
    s3, prefix, _ = person

    def exhaust() -> tuple[list[str], int]:
        """Requests until one is refused; the codes and the minute of the refusal."""
        codes: list[str] = []
        for _ in range(2 * RATE + 2):  # a fixed one-minute window: at most one reset on the way
            try:
                s3.head_bucket(Bucket=BUCKET)
                codes.append("ok")
            except ClientError as exc:
                codes.append(error_code(exc))
                break
        return codes, int(time.time() // 60)

    carried = 0  # requests already counted in the current window when a round starts
    for _ in range(3):  # a slow machine may cross into the next window before the put
        codes, minute = exhaust()
        assert codes[-1] in ("SlowDown", "503")
        assert codes.count("ok") >= RATE - carried
        try:
            s3.put_object(Bucket=BUCKET, Key=prefix + "x", Body=b"x")
        except ClientError as exc:
            assert error_code(exc) == "SlowDown"
            break
        assert int(time.time() // 60) != minute, "a request over the rate was served"
        s3.delete_object(Bucket=BUCKET, Key=prefix + "x")
        carried = 2  # the put and the delete, in the new window
    else:
        raise AssertionError("three windows in a row changed under the test")
    assert stored(prefix) == {}
    other = s3_client(web, temporary_credentials(web, login(make_user())), **NO_RETRIES)
    other.head_bucket(Bucket=BUCKET)  # one user's rate is not another's


def test_the_limits_keys_keep_their_format() -> None:
    assert keys.s3_rate(7, 29_000_000) == "rtc:s3:{7}:rate:29000000"
    assert keys.s3_usage(7) == "rtc:s3:{7}:usage"
