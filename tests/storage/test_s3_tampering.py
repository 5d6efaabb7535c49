"""Every tampering with a signed ``/s3/`` request is refused with S3's error, and nothing is
written: the body, the path, a signed header, the clock (16 minutes), an expired presigned URL,
a revoked credential, a user whose tokens were revoked, another user's prefix, keys no one may
name. Requests are signed by botocore's own signer, then altered, then sent byte for byte."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from botocore.exceptions import ClientError
from django.utils import timezone

from apps.accounts.services import user_revoke_tokens
from apps.storage import sigv4
from apps.storage.credentials import presign_credential
from apps.storage.s3.accesslog import redact_path
from tests.storage.s3_live import (
    BUCKET,
    S3Server,
    api_post,
    error_code,
    login,
    raw_request,
    s3_client,
    signed_request,
    start_s3_server,
    temporary_credentials,
)

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_s3_server(tmp_path_factory.mktemp("web-tamper"), tls=False)
    yield server
    server.stop()


class Person:
    """A user with a login, temporary credentials and a boto3 client to look with."""

    def __init__(self, web: S3Server, user: Any) -> None:
        self.user = user
        self.token = login(user)
        self.creds = temporary_credentials(web, self.token)
        self.prefix = self.creds["prefix"]
        self.s3 = s3_client(web, self.creds)

    def path(self, name: str) -> str:
        return f"/s3/{BUCKET}/{quote(self.prefix + name)}"

    def keys(self) -> list[str]:
        found = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=self.prefix)
        return [o["Key"] for o in found.get("Contents", [])]


@pytest.fixture
def alice(web: S3Server, make_user: Any) -> Person:
    return Person(web, make_user())


def send(web: S3Server, person: Person, method: str, path: str, body: bytes = b"", *,
         alter: Any = None, **sign: Any) -> Any:
    target, headers = signed_request(web, person.creds, method, path, body=body, **sign)
    if alter is not None:
        target, headers, body = alter(target, headers, body)
    return raw_request(web, method, target, body=body, headers=headers)


def test_an_untouched_signed_request_works(web, alice) -> None:
    reply = send(web, alice, "PUT", alice.path("ok.txt"), b"fine")
    assert reply.status == 200
    assert alice.keys() == [alice.prefix + "ok.txt"]


def test_a_changed_body_is_refused(web, alice) -> None:
    reply = send(web, alice, "PUT", alice.path("a.txt"), b"original",
                 alter=lambda t, h, b: (t, h, b"tampered"))
    assert (reply.status, reply.code()) == (400, "XAmzContentSHA256Mismatch")
    assert alice.keys() == []


def test_a_changed_path_is_refused(web, alice) -> None:
    reply = send(web, alice, "PUT", alice.path("a.txt"), b"data",
                 alter=lambda t, h, b: (t.replace("a.txt", "b.txt"), h, b))
    assert (reply.status, reply.code()) == (403, "SignatureDoesNotMatch")
    assert alice.keys() == []


def test_a_changed_signed_header_is_refused(web, alice) -> None:
    def alter(target: str, headers: dict, body: bytes) -> Any:
        return target, {**headers, "x-amz-meta-note": "two"}, body

    reply = send(web, alice, "PUT", alice.path("a.txt"), b"data",
                 headers={"x-amz-meta-note": "one"}, alter=alter)
    assert (reply.status, reply.code()) == (403, "SignatureDoesNotMatch")
    assert alice.keys() == []


def test_a_wrong_checksum_is_refused(web, alice) -> None:
    wrong = base64.b64encode(zlib.crc32(b"other").to_bytes(4, "big")).decode()
    reply = send(web, alice, "PUT", alice.path("a.txt"), b"data",
                 headers={"x-amz-checksum-crc32": wrong})
    assert reply.status == 400 and reply.code() in ("BadDigest", "XAmzContentChecksumMismatch")
    assert alice.keys() == []


@pytest.mark.parametrize(("minutes", "status", "code"), [
    (-16, 403, "RequestTimeTooSkewed"), (16, 403, "RequestTimeTooSkewed"), (-14, 200, None)])
def test_the_clock_may_be_off_by_15_minutes(web, alice, minutes, status, code) -> None:
    reply = send(web, alice, "PUT", alice.path("clock.txt"), b"data",
                 when=timezone.now() + timedelta(minutes=minutes))
    assert (reply.status, reply.code()) == (status, code)
    assert alice.keys() == ([alice.prefix + "clock.txt"] if status == 200 else [])


def test_an_expired_presigned_url_is_refused(web, alice) -> None:
    now = timezone.now().replace(microsecond=0)
    credential = presign_credential(user_id=alice.user.pk, family_id=None, min_life=60, now=now)

    def url(moment: Any) -> str:
        return sigv4.presign(method="PUT", base_url=web.url, bucket=BUCKET,
                             key=alice.prefix + "late.txt",
                             access_key_id=credential.access_key_id,
                             secret_key=credential.secret_access_key, session_token=None,
                             region="us-east-1", expires_in=60, now=moment)

    expired = url(now - timedelta(seconds=61)).removeprefix(web.url)
    reply = raw_request(web, "PUT", expired, body=b"late")
    assert (reply.status, reply.code()) == (403, "AccessDenied")
    assert b"Request has expired" in reply.body
    assert alice.keys() == []
    assert raw_request(web, "PUT", url(now).removeprefix(web.url), body=b"in time").status == 200


def test_a_presigned_url_with_an_altered_key_is_refused(web, alice) -> None:
    status, answer = api_post(web, "/api/presigned-url", alice.token,
                              {"operation": "put", "key": alice.prefix + "mine.txt"})
    assert status == 200
    target = answer["url"].removeprefix(web.url).replace("mine.txt", "yours.txt")
    reply = raw_request(web, "PUT", target, body=b"x")
    assert (reply.status, reply.code()) == (403, "SignatureDoesNotMatch")
    assert alice.keys() == []


def test_a_revoked_credential_is_refused(web, alice) -> None:
    status, _ = api_post(web, "/api/credentials/revoke", alice.token,
                         {"access_key_id": alice.creds["access_key_id"]})
    assert status == 200
    with pytest.raises(ClientError) as refused:
        alice.s3.put_object(Bucket=BUCKET, Key=alice.prefix + "x", Body=b"x")
    assert error_code(refused.value) == "InvalidAccessKeyId"
    fresh = s3_client(web, temporary_credentials(web, alice.token))
    assert fresh.list_objects_v2(Bucket=BUCKET, Prefix=alice.prefix)["KeyCount"] == 0


def test_a_credential_of_a_user_whose_tokens_were_revoked_is_refused(web, alice) -> None:
    alice.s3.put_object(Bucket=BUCKET, Key=alice.prefix + "before", Body=b"x")
    user_revoke_tokens(user_id=alice.user.pk)
    for call in (lambda: alice.s3.put_object(Bucket=BUCKET, Key=alice.prefix + "after",
                                             Body=b"x"),
                 lambda: alice.s3.get_object(Bucket=BUCKET, Key=alice.prefix + "before")):
        with pytest.raises(ClientError) as refused:
            call()
        assert error_code(refused.value) == "ExpiredToken"
    from apps.storage.store import get_store

    assert [o.key for o in get_store().list(alice.prefix).objects] == [alice.prefix + "before"]


def test_another_users_prefix_is_out_of_reach(web, alice, make_user) -> None:
    bob = Person(web, make_user())
    bob.s3.put_object(Bucket=BUCKET, Key=bob.prefix + "secret.txt", Body=b"bob's")
    theirs = bob.prefix + "secret.txt"
    calls = [
        lambda: alice.s3.get_object(Bucket=BUCKET, Key=theirs),
        lambda: alice.s3.head_object(Bucket=BUCKET, Key=theirs),
        lambda: alice.s3.put_object(Bucket=BUCKET, Key=bob.prefix + "planted", Body=b"x"),
        lambda: alice.s3.delete_object(Bucket=BUCKET, Key=theirs),
        lambda: alice.s3.list_objects_v2(Bucket=BUCKET, Prefix=bob.prefix),
        lambda: alice.s3.list_objects_v2(Bucket=BUCKET, Prefix="user-"),
        lambda: alice.s3.copy_object(Bucket=BUCKET, Key=alice.prefix + "stolen",
                                     CopySource={"Bucket": BUCKET, "Key": theirs}),
        lambda: alice.s3.copy_object(Bucket=BUCKET, Key=bob.prefix + "planted",
                                     CopySource={"Bucket": BUCKET, "Key": theirs}),
        lambda: alice.s3.create_multipart_upload(Bucket=BUCKET, Key=bob.prefix + "planted"),
    ]
    for call in calls:
        with pytest.raises(ClientError) as refused:
            call()
        assert error_code(refused.value) in ("AccessDenied", "403")
    assert bob.keys() == [theirs]
    assert bob.s3.get_object(Bucket=BUCKET, Key=theirs)["Body"].read() == b"bob's"
    assert alice.keys() == []


@pytest.mark.parametrize("raw_name", [
    "a/../b", "%2e%2e/b", "a/%2E%2E/b", "a%5Cb", "a%00b", "a%01b", "a%7Fb",
    "../{other}/x", "x" * 1020,
])
def test_keys_no_one_may_name_are_refused(web, alice, make_user, raw_name) -> None:
    other = make_user()
    path = f"/s3/{BUCKET}/{alice.prefix}{raw_name.format(other=f'user-{other.pk}')}"
    reply = send(web, alice, "PUT", path, b"data")
    assert (reply.status, reply.code()) == (400, "InvalidArgument")
    assert alice.keys() == []
    from apps.storage.store import get_store

    assert get_store().list(f"user-{other.pk}/").objects == []


def test_credentials_that_do_not_add_up_are_refused(web, alice) -> None:
    def token(target: str, headers: dict, body: bytes) -> Any:
        return target, {**headers, "X-Amz-Security-Token": "forged"}, body

    cases = [
        (send(web, alice, "GET", alice.path("x"), alter=token), 403, "SignatureDoesNotMatch"),
        (raw_request(web, "GET", alice.path("x")), 403, "AccessDenied"),
    ]
    stranger = {**alice.creds, "access_key_id": "RTCAUNKNOWNKEY000000"}
    target, headers = signed_request(web, stranger, "GET", alice.path("x"))
    cases.append((raw_request(web, "GET", target, headers=headers), 403, "InvalidAccessKeyId"))
    wrong_token = {**alice.creds, "session_token": "not-the-token"}
    target, headers = signed_request(web, wrong_token, "GET", alice.path("x"))
    cases.append((raw_request(web, "GET", target, headers=headers), 400, "InvalidToken"))
    for reply, status, code in cases:
        assert (reply.status, reply.code()) == (status, code)
        assert reply.headers["x-amz-request-id"]


def test_errors_are_xml_with_a_request_id(web, alice) -> None:
    reply = send(web, alice, "GET", f"/s3/{BUCKET}/{alice.prefix}missing")
    assert reply.status == 404
    assert reply.headers["content-type"] == "application/xml"
    from defusedxml import ElementTree

    error = ElementTree.fromstring(reply.body)
    assert error.tag == "Error"
    assert error.findtext("Code") == "NoSuchKey"
    assert error.findtext("Resource") == f"/s3/{BUCKET}/{alice.prefix}missing"
    assert error.findtext("RequestId") == reply.headers["x-amz-request-id"]
    unknown = send(web, alice, "PUT", f"/s3/{BUCKET}", query="policy")
    assert (unknown.status, unknown.code()) == (501, "NotImplemented")


def test_nothing_secret_reaches_the_logs(web, alice) -> None:
    status, answer = api_post(web, "/api/presigned-url", alice.token,
                              {"operation": "put", "key": alice.prefix + "logged.txt"})
    assert status == 200
    url = answer["url"]
    assert raw_request(web, "PUT", url.removeprefix(web.url), body=b"x").status == 200
    target, headers = signed_request(web, alice.creds, "GET", alice.path("logged.txt"))
    assert raw_request(web, "GET", target, headers=headers).status == 200
    presigned_signature = url.rsplit("X-Amz-Signature=", 1)[1]
    header_signature = headers["Authorization"].rsplit("Signature=", 1)[1]
    log = web.output()
    assert "logged.txt" in log  # the requests are in it ...
    for secret in (presigned_signature, header_signature, alice.creds["secret_access_key"],
                   alice.creds["session_token"], alice.token):
        assert secret not in log  # ... their credentials are not


def test_the_access_log_redacts_bearer_parameters() -> None:
    path = ("/s3/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=RTCA%2F1"
            "&X-Amz-Security-Token=tok&x-amz-signature=abc&list-type=2")
    assert redact_path(path) == (
        "/s3/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=RTCA%2F1"
        "&X-Amz-Security-Token=REDACTED&x-amz-signature=REDACTED&list-type=2")
    assert redact_path("/s3/b/k") == "/s3/b/k"
