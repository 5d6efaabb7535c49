"""``private_key_jwt`` client authentication (RFC 7523 §2.2, OpenID Connect Core §9) on
``/oauth2/token`` and ``/oauth2/revoke``: the client's public keys are served over HTTP by a real
``TestIssuer``; the subject tokens come from a second one. Every refusal checks that no user or
identity was created."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from io import StringIO
from typing import Any
from urllib.parse import urlencode

import jwt
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from apps.accounts.clients import ASSERTION_TYPE, oauth_client_create
from apps.accounts.models import ExternalIdentity, OAuthClient
from tests.accounts.issuer import TestIssuer
from tests.accounts.test_token_exchange import EXCHANGE, JWT_TYPE
from tests.accounts.test_token_exchange import issuer as issuer  # the trusted subject issuer

pytestmark = pytest.mark.django_db

TOKEN_URL = "http://testserver/oauth2/token"


@pytest.fixture
def keys() -> Iterator[TestIssuer]:
    """The client's own key set, its JWKS served over HTTP."""
    server = TestIssuer("ES256")
    yield server
    server.stop()


@pytest.fixture
def client_id(keys: TestIssuer) -> str:
    row, secret = oauth_client_create(name="backend", jwks_uri=keys.jwks_uri)
    assert secret == ""
    return row.client_id


def assertion(keys: TestIssuer, client_id: str, *, key: Any = None,
              headers: dict[str, Any] | None = None, **changes: Any) -> str:
    now = int(time.time())
    claims = {"iss": client_id, "sub": client_id, "aud": TOKEN_URL, "iat": now,
              "exp": now + 60, "jti": uuid.uuid4().hex, **changes}
    claims = {k: v for k, v in claims.items() if v is not None}
    key = key or keys.signing
    return jwt.encode(claims, key.private_key, algorithm=key.algorithm,
                      headers={"kid": key.kid, **(headers or {})})


def exchange(client: Client, issuer: TestIssuer, extra: dict[str, str],
             **http: str) -> Any:
    form = {"grant_type": EXCHANGE, "subject_token": issuer.token(),
            "subject_token_type": JWT_TYPE, **extra}
    return client.post("/oauth2/token", data=urlencode(form),
                       content_type="application/x-www-form-urlencoded", **http)


def by_assertion(token: str) -> dict[str, str]:
    return {"client_assertion_type": ASSERTION_TYPE, "client_assertion": token}


def nothing_created() -> None:
    assert get_user_model().objects.count() == 0
    assert ExternalIdentity.objects.count() == 0


def test_exchange_authenticated_by_assertion(client: Client, issuer: TestIssuer,
                                             keys: TestIssuer, client_id: str) -> None:
    response = exchange(client, issuer, by_assertion(assertion(keys, client_id)))
    assert response.status_code == 200, response.content
    assert response.json()["access_token"]
    assert ExternalIdentity.objects.count() == 1


def test_our_issuer_is_an_accepted_audience(client: Client, issuer: TestIssuer, keys: TestIssuer,
                                            client_id: str, settings: Any) -> None:
    token = assertion(keys, client_id, aud=[settings.RTC_JWT_ISSUER])
    assert exchange(client, issuer, by_assertion(token)).status_code == 200


def test_inline_jwks(client: Client, issuer: TestIssuer, keys: TestIssuer) -> None:
    row, _ = oauth_client_create(name="inline", jwks={"keys": [keys.signing.jwk()]})
    response = exchange(client, issuer, by_assertion(assertion(keys, row.client_id)))
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("changes", [
    {"aud": "http://elsewhere.example/oauth2/token"},
    {"exp": int(time.time()) - 3600},
    {"exp": None},
    {"exp": int(time.time()) + 3600},
    {"jti": None},
    {"sub": "someone-else"},
])
def test_bad_claims_refused(client: Client, issuer: TestIssuer, keys: TestIssuer,
                            client_id: str, changes: dict[str, Any]) -> None:
    if "exp" in changes and changes["exp"] is not None and changes["exp"] < time.time():
        changes = {**changes, "iat": changes["exp"] - 60}
    response = exchange(client, issuer, by_assertion(assertion(keys, client_id, **changes)))
    assert response.status_code == 401, response.content
    assert response.json()["error"] == "invalid_client"
    nothing_created()


def test_wrong_iss_refused(client: Client, issuer: TestIssuer, keys: TestIssuer,
                           client_id: str) -> None:
    other, _ = oauth_client_create(name="other")
    token = assertion(keys, client_id, iss=other.client_id, sub=other.client_id)
    response = exchange(client, issuer, by_assertion(token))
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
    # iss names the client, client_id another one
    token = assertion(keys, client_id)
    response = exchange(client, issuer, {**by_assertion(token), "client_id": other.client_id})
    assert response.json()["error"] == "invalid_client"
    nothing_created()


def test_replayed_jti_refused(client: Client, issuer: TestIssuer, keys: TestIssuer,
                              client_id: str) -> None:
    token = assertion(keys, client_id)
    assert exchange(client, issuer, by_assertion(token)).status_code == 200
    users = get_user_model().objects.count()
    response = exchange(client, issuer, by_assertion(token))
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
    assert get_user_model().objects.count() == users


def test_unknown_kid_refused(client: Client, issuer: TestIssuer, keys: TestIssuer,
                             client_id: str) -> None:
    stranger = TestIssuer("ES256")
    try:
        token = assertion(keys, client_id, key=stranger.signing)
    finally:
        stranger.stop()
    response = exchange(client, issuer, by_assertion(token))
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
    nothing_created()


def _unsigned(claims: dict[str, Any], header: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    return f"{part(header)}.{part(claims)}."


def test_alg_none_hs256_and_embedded_keys_refused(client: Client, issuer: TestIssuer,
                                                  keys: TestIssuer, client_id: str) -> None:
    claims = jwt.decode(assertion(keys, client_id), options={"verify_signature": False})
    forged = [
        _unsigned(claims, {"alg": "none", "typ": "JWT", "kid": keys.signing.kid}),
        jwt.encode({**claims, "jti": uuid.uuid4().hex}, "x" * 32, algorithm="HS256",
                   headers={"kid": keys.signing.kid}),
        assertion(keys, client_id, headers={"jku": keys.jwks_uri}),
        assertion(keys, client_id, headers={"jwk": keys.signing.jwk()}),
    ]
    for token in forged:
        response = exchange(client, issuer, by_assertion(token))
        assert response.status_code == 401, token
        assert response.json()["error"] == "invalid_client"
    nothing_created()


def test_secret_from_key_client_refused(client: Client, issuer: TestIssuer, keys: TestIssuer,
                                        client_id: str) -> None:
    OAuthClient.objects.filter(client_id=client_id).update(secret_hash="0" * 64)
    response = exchange(client, issuer, {"client_id": client_id, "client_secret": "guess"})
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
    response = exchange(client, issuer, {"client_id": client_id})
    assert response.json()["error"] == "invalid_client"
    nothing_created()


def test_two_methods_refused(client: Client, issuer: TestIssuer, keys: TestIssuer,
                             client_id: str) -> None:
    token = assertion(keys, client_id)
    response = exchange(client, issuer, {**by_assertion(token), "client_secret": "x"})
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    basic = "Basic " + base64.b64encode(f"{client_id}:x".encode()).decode()
    response = exchange(client, issuer, by_assertion(assertion(keys, client_id)),
                        HTTP_AUTHORIZATION=basic)
    assert response.json()["error"] == "invalid_request"
    nothing_created()


def test_secret_client_cannot_use_assertion(client: Client, issuer: TestIssuer,
                                            keys: TestIssuer) -> None:
    row, _ = oauth_client_create(name="secret-client")
    response = exchange(client, issuer, by_assertion(assertion(keys, row.client_id)))
    assert response.json()["error"] == "invalid_client"
    nothing_created()


def test_revoke_with_assertion(client: Client, issuer: TestIssuer, keys: TestIssuer,
                               client_id: str) -> None:
    response = exchange(client, issuer, by_assertion(assertion(keys, client_id)))
    refresh = response.json()["refresh_token"]  # a confidential client's exchange has one
    access = response.json()["access_token"]
    bad = client.post("/oauth2/revoke", data=urlencode(
        {"token": refresh, **by_assertion(assertion(keys, client_id, aud="nope"))}),
        content_type="application/x-www-form-urlencoded")
    assert bad.status_code == 401
    assert bad.json()["error"] == "invalid_client"
    assert client.get("/api/auth/me/", HTTP_AUTHORIZATION=f"Bearer {access}").status_code == 200
    good = client.post("/oauth2/revoke", data=urlencode(
        {"token": refresh, **by_assertion(assertion(keys, client_id))}),
        content_type="application/x-www-form-urlencoded")
    assert good.status_code == 200, good.content
    me = client.get("/api/auth/me/", HTTP_AUTHORIZATION=f"Bearer {access}")
    assert me.status_code == 401  # the login was really revoked (200 alone proves nothing)


def test_command_creates_key_client(keys: TestIssuer) -> None:
    out = StringIO()
    call_command("oauth_client", "create", "--name", "cli", "--jwks-uri", keys.jwks_uri,
                 stdout=out)
    data = json.loads(out.getvalue())
    assert "client_secret" not in data
    row = OAuthClient.objects.get(client_id=data["client_id"])
    assert row.auth_method == OAuthClient.AuthMethod.PRIVATE_KEY_JWT
    assert row.jwks_uri == keys.jwks_uri


def test_admin_creates_key_client(admin_client: Client, keys: TestIssuer) -> None:
    response = admin_client.post("/admin/accounts/oauthclient/add/", {
        "name": "from-admin", "jwks_uri": keys.jwks_uri, "jwks": "",
        "grants": '["token-exchange"]', "redirect_uris": "[]", "is_active": "on",
    })
    assert response.status_code == 302, response.content[:2000]
    row = OAuthClient.objects.get(name="from-admin")
    assert row.auth_method == OAuthClient.AuthMethod.PRIVATE_KEY_JWT
    assert row.secret_hash == ""
