"""``POST /api/presigned-url`` and ``service_presign``: lifetimes and their limits, the key
rules, the caller's prefix, and URLs used with plain HTTP against the live ``/s3/`` (a browser's
cross-origin PUT included)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from email.message import Message
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils import timezone

from apps.accounts.services import user_revoke_tokens
from apps.accounts.tokens import issue_access_token
from apps.storage import presign
from apps.storage.models import S3Credential
from tests.storage.s3_live import (
    S3Server,
    login,
    presigned_url,
    raw_request,
    s3_client,
    start_s3_server,
    temporary_credentials,
)

BAD_KEYS = [
    ("user-{id}/a/../b", "'..' segment"),
    ("user-{id}/%2e%2e/b", "percent-decoded '..'"),
    ("user-{id}/a\\b", "backslash"),
    ("user-{id}/a\x00b", "NUL"),
    ("user-{id}/a\x1fb", "control character"),
    ("user-{id}/" + "é" * 600, "over 1024 UTF-8 bytes"),
]


def ask(token: str, body: dict) -> Any:
    return Client().post("/api/presigned-url", body, content_type="application/json",
                         headers={"Authorization": f"Bearer {token}"})


# --- the API in process ----------------------------------------------------------------------


@pytest.mark.django_db
def test_default_lifetime_and_the_url(make_user) -> None:
    user = make_user()
    before = timezone.now().replace(microsecond=0)
    reply = ask(issue_access_token(user), {"operation": "put", "key": f"user-{user.pk}/a b+ü.png"})
    assert reply.status_code == 200
    body = reply.json()
    parts = urlsplit(body["url"])
    assert (parts.scheme, parts.netloc) == ("http", "testserver")
    assert parts.path == f"/s3/rtc-agent/user-{user.pk}/" + quote("a b+ü.png", safe="")
    query = parse_qs(parts.query)
    assert query["X-Amz-Expires"] == ["3600"]
    assert query["X-Amz-SignedHeaders"] == ["host"]
    assert "X-Amz-Security-Token" not in query
    expires = timezone.datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    assert before + timedelta(seconds=3600) <= expires <= timezone.now() + timedelta(seconds=3600)


@pytest.mark.django_db
def test_the_url_uses_the_public_url_when_configured(make_user, settings) -> None:
    settings.RTC_PUBLIC_URL = "https://files.example.com/rtc"
    user = make_user()
    url = ask(issue_access_token(user), {"operation": "get", "key": f"user-{user.pk}/x"}).json()
    assert url["url"].startswith(f"https://files.example.com/rtc/s3/rtc-agent/user-{user.pk}/x?")


@pytest.mark.django_db
@pytest.mark.parametrize(("expires_in", "limit"), [
    (604801, "PRESIGN_MAX_EXPIRES"), (43201, "S3_CREDENTIAL_TTL")])
def test_a_lifetime_past_a_limit_is_refused_naming_it(make_user, expires_in, limit) -> None:
    user = make_user()
    reply = ask(issue_access_token(user),
                {"operation": "get", "key": f"user-{user.pk}/x", "expires_in": expires_in})
    assert reply.status_code == 400
    assert limit in reply.json()["message"]
    assert reply.json()["details"]["max"] == 43200
    assert not S3Credential.objects.exists()


@pytest.mark.django_db
def test_the_longest_lifetime_is_the_credential_life(make_user, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "S3_CREDENTIAL_TTL": 7200}
    user = make_user()
    token = issue_access_token(user)
    assert ask(token, {"operation": "get", "key": f"user-{user.pk}/x",
                       "expires_in": 7200}).status_code == 200
    assert ask(token, {"operation": "get", "key": f"user-{user.pk}/x",
                       "expires_in": 7201}).status_code == 400
    # a default longer than the credential's life is cut to it
    settings.RTCAGENT = {**settings.RTCAGENT, "S3_CREDENTIAL_TTL": 600}
    url = ask(token, {"operation": "get", "key": f"user-{user.pk}/x"}).json()["url"]
    assert parse_qs(urlsplit(url).query)["X-Amz-Expires"] == ["600"]


@pytest.mark.django_db
@pytest.mark.parametrize("body", [
    {"operation": "delete", "key": "user-{id}/x"},
    {"operation": "get", "key": ""},
    {"operation": "get"},
    {"operation": "get", "key": "user-{id}/x", "expires_in": 0},
    {"operation": "get", "key": "user-{id}/x", "expires_in": -5},
    {"operation": "get", "key": "user-{id}/x", "expires_in": "soon"},
])
def test_bad_bodies_are_refused(make_user, body) -> None:
    user = make_user()
    body = {k: v.format(id=user.pk) if isinstance(v, str) else v for k, v in body.items()}
    reply = ask(issue_access_token(user), body)
    assert reply.status_code == 400
    assert reply.json()["code"] == "invalid_request"
    assert not S3Credential.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("key", "why"), BAD_KEYS)
def test_bad_keys_are_refused(make_user, key, why) -> None:
    user = make_user()
    reply = ask(issue_access_token(user), {"operation": "put", "key": key.format(id=user.pk)})
    assert reply.status_code == 400, why
    # the key rules answer, or the JSON parser first for a NUL anywhere in a body
    assert reply.json()["code"] == "invalid_request"
    assert "key" in reply.json()["message"]
    assert not S3Credential.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["user-{other}/x", "user-{id}", "x/user-{id}/y", "user-{id}0/x"])
def test_keys_outside_the_prefix_are_forbidden(make_user, key) -> None:
    user, other = make_user(), make_user()
    reply = ask(issue_access_token(user),
                {"operation": "get", "key": key.format(id=user.pk, other=other.pk)})
    assert reply.status_code == 403
    assert reply.json()["details"]["prefix"] == f"user-{user.pk}/"
    assert not S3Credential.objects.exists()


@pytest.mark.django_db
def test_presign_needs_a_token() -> None:
    reply = Client().post("/api/presigned-url", {"operation": "get", "key": "user-1/x"},
                          content_type="application/json")
    assert reply.status_code == 401


@pytest.mark.django_db
def test_one_server_held_credential_signs_many_urls(make_user) -> None:
    user = make_user()
    token = issue_access_token(user)
    for name in ("a", "b", "c"):
        assert ask(token, {"operation": "put", "key": f"user-{user.pk}/{name}"}).status_code == 200
    assert S3Credential.objects.filter(kind="presign").count() == 1
    # a longer life than the one held needs a new credential
    S3Credential.objects.update(expires_at=timezone.now() + timedelta(seconds=100))
    ask(token, {"operation": "put", "key": f"user-{user.pk}/d", "expires_in": 200})
    assert S3Credential.objects.filter(kind="presign").count() == 2


@pytest.mark.django_db
def test_presigning_is_rate_limited(make_user, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "S3_REQUESTS_PER_MINUTE": 3}
    user = make_user()
    token = issue_access_token(user)
    codes = [ask(token, {"operation": "get", "key": f"user-{user.pk}/x"}).status_code
             for _ in range(4)]
    assert codes == [200, 200, 200, 429]


def test_service_presign_needs_the_public_url(settings) -> None:
    settings.RTC_PUBLIC_URL = ""
    with pytest.raises(ImproperlyConfigured, match="RTC_PUBLIC_URL"):
        presign.service_presign("GET", "_derived/x.jpg", expires_in=60)


# --- live: plain HTTP with the URLs ----------------------------------------------------------


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_s3_server(tmp_path_factory.mktemp("web"), tls=False,
                             RTC_ALLOWED_ORIGINS="https://app.example.com")
    yield server
    server.stop()


def http(method: str, url: str, data: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Message, bytes]:
    """Status, headers (looked up in any case: servers may send names in lower case, as HTTP
    allows) and body."""
    request = urllib.request.Request(url, data=data, method=method,  # noqa: S310
                                     headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


@pytest.mark.django_db(transaction=True)
def test_presigned_put_then_get_with_plain_http(web, make_user) -> None:
    user = make_user()
    token = login(user)
    key = f"user-{user.pk}/up loads/photo+1 ü.png"
    status, headers, _ = http("PUT", presigned_url(web, token, "put", key), b"\x89PNG data",
                              {"Content-Type": "image/png"})
    assert status == 200
    assert headers["ETag"].strip('"')
    status, headers, body = http("GET", presigned_url(web, token, "get", key))
    assert (status, body, headers["Content-Type"]) == (200, b"\x89PNG data", "image/png")
    # a GET URL does not PUT, nor a PUT URL GET: the method is signed
    status, _, body = http("PUT", presigned_url(web, token, "get", key), b"other")
    assert status == 403 and b"SignatureDoesNotMatch" in body
    creds = temporary_credentials(web, token)
    assert s3_client(web, creds).get_object(Bucket="rtc-agent", Key=key)["Body"].read() == \
        b"\x89PNG data"


@pytest.mark.django_db(transaction=True)
def test_revoking_the_users_tokens_kills_their_urls(web, make_user) -> None:
    user = make_user()
    token = login(user)
    key = f"user-{user.pk}/doc.txt"
    assert http("PUT", presigned_url(web, token, "put", key), b"v1")[0] == 200
    get_url, put_url = presigned_url(web, token, "get", key), presigned_url(web, token, "put", key)
    S3Credential.objects.update(created_at=timezone.now() - timedelta(seconds=5))
    user_revoke_tokens(user_id=user.pk)
    status, _, body = http("GET", get_url)
    assert status == 400 and b"<Code>ExpiredToken</Code>" in body
    status, _, body = http("PUT", put_url, b"v2")
    assert status == 400 and b"<Code>ExpiredToken</Code>" in body


@pytest.mark.django_db(transaction=True)
def test_revoking_all_credentials_kills_presigned_urls(web, make_user) -> None:
    user = make_user()
    token = login(user)
    url = presigned_url(web, token, "put", f"user-{user.pk}/x")
    status, _, _ = http("POST", f"{web.url}/api/credentials/revoke", b'{"all": true}',
                        {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    assert status == 200
    status, _, body = http("PUT", url, b"data")
    assert status == 403 and b"<Code>InvalidAccessKeyId</Code>" in body


@pytest.mark.django_db(transaction=True)
def test_a_cross_origin_browser_may_put_and_read_the_etag(web, make_user) -> None:
    user = make_user()
    url = presigned_url(web, login(user), "put", f"user-{user.pk}/cors.txt")
    target = url.removeprefix(web.url)
    preflight = raw_request(web, "OPTIONS", target, headers={
        "Origin": "https://app.example.com", "Access-Control-Request-Method": "PUT",
        "Access-Control-Request-Headers": "content-type"})
    assert preflight.status == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example.com"
    assert "PUT" in preflight.headers["access-control-allow-methods"]
    assert "content-type" in preflight.headers["access-control-allow-headers"]
    put = raw_request(web, "PUT", target, body=b"hi", headers={
        "Origin": "https://app.example.com", "Content-Type": "text/plain"})
    assert put.status == 200
    assert put.headers["access-control-allow-origin"] == "https://app.example.com"
    assert "ETag" in put.headers["access-control-expose-headers"]
    stranger = raw_request(web, "OPTIONS", target, headers={
        "Origin": "https://evil.example.net", "Access-Control-Request-Method": "PUT"})
    assert "access-control-allow-origin" not in stranger.headers


@pytest.mark.django_db(transaction=True)
def test_service_urls_put_and_get_any_key_and_nothing_else(web, make_user, settings) -> None:
    settings.RTC_PUBLIC_URL = web.url
    key = "_derived/7/thumb.jpg"
    put_url = presign.service_presign("PUT", key, expires_in=60, content_type="image/jpeg")
    assert http("PUT", put_url, b"jpeg bytes", {"Content-Type": "text/html"})[0] == 200
    status, headers, body = http("GET", presign.service_presign("GET", key, expires_in=60))
    assert (status, body, headers["Content-Type"]) == (200, b"jpeg bytes", "image/jpeg")
    head = http("HEAD", presign.service_presign("HEAD", key, expires_in=60))
    assert head[0] == 200 and head[1]["Content-Length"] == "10"
    # the service credential signs nothing but presigned URLs of one object
    from apps.storage.credentials import SERVICE_ACCESS_KEY_ID, credential_secret

    service = {"access_key_id": SERVICE_ACCESS_KEY_ID, "session_token": None,
               "secret_access_key": credential_secret(SERVICE_ACCESS_KEY_ID),
               "endpoint_url": f"{web.url}/s3", "region": "us-east-1"}
    client = s3_client(web, service)
    with pytest.raises(Exception, match="AccessDenied"):
        client.list_objects_v2(Bucket="rtc-agent", Prefix="_derived/")
    with pytest.raises(Exception, match="AccessDenied"):
        client.delete_object(Bucket="rtc-agent", Key=key)
    assert http("GET", presign.service_presign("GET", key, expires_in=60))[0] == 200
