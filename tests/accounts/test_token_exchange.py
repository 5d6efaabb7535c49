"""RFC 8693 token exchange on ``POST /oauth2/token`` against a real second issuer (its own keys,
its JWKS served over HTTP by ``tests.accounts.issuer``). Every refusal also checks that no user,
identity, device or token was created."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from io import StringIO
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from apps.accounts.clients import oauth_client_create
from apps.accounts.exchange import admin_token_issue
from apps.accounts.models import (
    Device,
    ExternalIdentity,
    OAuthClient,
    TokenFamily,
    TrustedIssuer,
)
from apps.accounts.tokens import decode_access_token, issue_access_token
from tests.accounts.issuer import TestIssuer

pytestmark = pytest.mark.django_db

EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ACCESS_TYPE = "urn:ietf:params:oauth:token-type:access_token"


@pytest.fixture
def issuer(settings: Any) -> Iterator[TestIssuer]:
    server = TestIssuer("RS256")
    settings.RTC_TRUSTED_ISSUERS = [server.config()]
    yield server
    server.stop()


@pytest.fixture
def site_client() -> tuple[str, str]:
    client, secret = oauth_client_create(name="site")
    return client.client_id, secret


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def exchange(client: Client, creds: tuple[str, str] | None, subject: str, *, basic: bool = True,
             **extra: str) -> Any:
    form = {"grant_type": EXCHANGE, "subject_token": subject, "subject_token_type": JWT_TYPE,
            **extra}
    headers = {}
    if creds and basic:
        headers["HTTP_AUTHORIZATION"] = "Basic " + base64.b64encode(
            f"{creds[0]}:{creds[1]}".encode()).decode()
    elif creds:
        form.update(client_id=creds[0], client_secret=creds[1])
    return client.post("/oauth2/token", data=_urlencode(form),
                       content_type="application/x-www-form-urlencoded", **headers)


def _urlencode(form: dict[str, str]) -> str:
    from urllib.parse import urlencode

    return urlencode(form)


def a_minute_later(issuer: TestIssuer) -> None:
    """Open the issuer's refetch gate, as a minute passing would (the cached JWKS stays)."""
    from django.core.cache import cache

    from apps.accounts.issuers import IssuerConfig, _cache_keys

    cache.delete(_cache_keys(IssuerConfig.from_mapping(issuer.config()))[1])


def state() -> tuple[int, int, int]:
    return (get_user_model().objects.count(), ExternalIdentity.objects.count(),
            Device.objects.count())


def refused(res: Any, code: str, status: int = 400) -> None:
    assert res.status_code == status, res.content
    assert res.json()["error"] == code
    assert "access_token" not in res.json()
    assert res["Cache-Control"] == "no-store"


# --- happy path -----------------------------------------------------------------------------


def test_exchange_creates_the_user_identity_and_device(client: Client, issuer: TestIssuer,
                                                       site_client: tuple[str, str]) -> None:
    res = exchange(client, site_client, issuer.token())
    assert res.status_code == 200, res.content
    body = res.json()
    assert set(body) == {"access_token", "issued_token_type", "token_type", "expires_in",
                         "refresh_token"}  # a confidential client
    assert body["issued_token_type"] == ACCESS_TYPE
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 900
    assert res["Cache-Control"] == "no-store"
    claims = decode_access_token(body["access_token"])
    identity = ExternalIdentity.objects.get()
    assert (identity.issuer, identity.subject) == (issuer.url, "user-1")
    assert claims["sub"] == str(identity.user_id)
    assert claims["device_id"] == "dev-1"
    assert identity.user.email == "ann@site.example"
    assert identity.user.first_name == "Ann Site"
    assert not identity.user.has_usable_password()
    assert list(Device.objects.values_list("user_id", "device_id")) == [
        (identity.user_id, "dev-1")]
    again = exchange(client, site_client, issuer.token(device_id="dev-2"), basic=False)
    assert again.status_code == 200
    assert decode_access_token(again.json()["access_token"])["sub"] == str(identity.user_id)
    assert state() == (1, 1, 2)
    assert issuer.jwks_fetches() == 1  # cached


@pytest.mark.parametrize("algorithm", ["ES256", "EdDSA"])
def test_exchange_accepts_ec_and_eddsa_issuers(client: Client, settings: Any, algorithm: str,
                                               site_client: tuple[str, str]) -> None:
    server = TestIssuer(algorithm)
    try:
        settings.RTC_TRUSTED_ISSUERS = [server.config()]
        res = exchange(client, site_client, server.token())
        assert res.status_code == 200, res.content
    finally:
        server.stop()


def test_a_trusted_issuer_from_the_admin_model(client: Client, settings: Any,
                                               site_client: tuple[str, str]) -> None:
    server = TestIssuer()
    try:
        settings.RTC_TRUSTED_ISSUERS = []
        TrustedIssuer.objects.create(issuer=server.url, jwks_uri=server.jwks_uri,
                                     audiences=["rtcagent"], max_token_minutes=5,
                                     claims={"subject": "uid"})
        res = exchange(client, site_client, server.token(uid="u-77"))
        assert res.status_code == 200, res.content
        assert res.json()["expires_in"] == 300
        assert ExternalIdentity.objects.get().subject == "u-77"
    finally:
        server.stop()


def test_same_email_is_not_merged_unless_configured(client: Client, settings: Any,
                                                    issuer: TestIssuer, make_user: Any,
                                                    site_client: tuple[str, str]) -> None:
    local = make_user("ann@site.example")
    res = exchange(client, site_client, issuer.token())
    user_id = int(decode_access_token(res.json()["access_token"])["sub"])
    assert user_id != local.pk
    assert get_user_model().objects.get(pk=user_id).email.endswith("@external.invalid")
    settings.RTC_TRUSTED_ISSUERS = [issuer.config(merge_by_email=True)]
    res = exchange(client, site_client, issuer.token(sub="user-2"))
    assert int(decode_access_token(res.json()["access_token"])["sub"]) == local.pk


def test_rotation_keeps_old_tokens_valid_during_the_overlap(
        client: Client, issuer: TestIssuer, site_client: tuple[str, str], settings: Any) -> None:
    old = issuer.signing
    old_token = issuer.token()
    assert exchange(client, site_client, old_token).status_code == 200
    issuer.rotate("ES256")
    a_minute_later(issuer)
    # The cached JWKS does not know the new kid: exactly one refetch finds it.
    assert exchange(client, site_client, issuer.token()).status_code == 200
    assert issuer.jwks_fetches() == 2
    assert exchange(client, site_client, issuer.token(key=old)).status_code == 200
    issuer.retire()
    from apps.accounts.issuers import IssuerConfig, jwks_cache_clear

    jwks_cache_clear(IssuerConfig.from_mapping(issuer.config()))
    before = state()
    refused(exchange(client, site_client, issuer.token(key=old, sub="user-9")), "invalid_grant")
    assert state() == before


# --- refusals -------------------------------------------------------------------------------


def _hs256_with_public_pem(issuer: TestIssuer) -> str:
    header = {"alg": "HS256", "kid": issuer.signing.kid, "typ": "JWT"}
    signing_input = (b64url(json.dumps(header).encode()) + "."
                     + b64url(json.dumps(issuer.claims()).encode()))
    pem = issuer.signing.public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    sig = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + b64url(sig)


def _unsigned(issuer: TestIssuer, alg: str) -> str:
    header = {"alg": alg, "kid": issuer.signing.kid, "typ": "JWT"}
    return (b64url(json.dumps(header).encode()) + "."
            + b64url(json.dumps(issuer.claims()).encode()) + ".")


def _forged(issuer: TestIssuer) -> str:
    from tests.accounts.issuer import new_key

    other = new_key("RS256")
    return jwt.encode(issuer.claims(), other.private_key, algorithm="RS256",
                      headers={"kid": issuer.signing.kid})


REFUSALS: dict[str, Any] = {
    "expired": lambda i: i.token(exp=int(time.time()) - 120, iat=int(time.time()) - 600),
    "not_yet_valid": lambda i: i.token(nbf=int(time.time()) + 600),
    "forged_signature": _forged,
    "alg_none": lambda i: _unsigned(i, "none"),
    "alg_None": lambda i: _unsigned(i, "None"),
    "alg_NONE": lambda i: _unsigned(i, "NONE"),
    "alg_nOnE": lambda i: _unsigned(i, "nOnE"),
    "hs256_public_key": _hs256_with_public_pem,
    "wrong_audience": lambda i: i.token(aud="someone-else"),
    "no_audience": lambda i: i.token(aud=None),
    "no_exp": lambda i: i.token(exp=None),
    "unknown_issuer": lambda i: i.token(iss="https://evil.example"),
    "no_subject": lambda i: i.token(sub=None),
    "not_a_jwt": lambda i: "not.a.jwt",
}


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_bad_subject_tokens_are_invalid_grant_and_create_nothing(
        client: Client, issuer: TestIssuer, site_client: tuple[str, str], kind: str) -> None:
    token = REFUSALS[kind](issuer)
    refused(exchange(client, site_client, token), "invalid_grant")
    assert state() == (0, 0, 0)


@pytest.mark.parametrize("header", ["jku", "x5u"])
def test_jku_and_x5u_headers_are_refused_without_contacting_them(
        client: Client, issuer: TestIssuer, site_client: tuple[str, str], header: str) -> None:
    token = issuer.token(headers={header: issuer.url + f"/attacker-{header}"})
    refused(exchange(client, site_client, token), "invalid_grant")
    assert [p for p in issuer.requests if "attacker" in p] == []
    assert issuer.requests == []  # the token is refused before any key lookup
    assert state() == (0, 0, 0)


def test_an_embedded_jwk_header_is_refused(client: Client, issuer: TestIssuer,
                                           site_client: tuple[str, str]) -> None:
    from tests.accounts.issuer import new_key

    own = new_key("RS256")
    token = jwt.encode(issuer.claims(), own.private_key, algorithm="RS256",
                       headers={"kid": own.kid, "jwk": own.jwk()})
    refused(exchange(client, site_client, token), "invalid_grant")
    assert state() == (0, 0, 0)


def test_unknown_kid_refetches_once_then_is_refused(client: Client, issuer: TestIssuer,
                                                     site_client: tuple[str, str]) -> None:
    assert exchange(client, site_client, issuer.token()).status_code == 200
    assert issuer.jwks_fetches() == 1
    before = state()
    from tests.accounts.issuer import new_key

    stranger = new_key("RS256")
    a_minute_later(issuer)
    refused(exchange(client, site_client, issuer.token(key=stranger, sub="x")), "invalid_grant")
    assert issuer.jwks_fetches() == 2
    # Within the minute: no further fetch, however many unknown kids arrive.
    for n in range(5):
        refused(exchange(client, site_client, issuer.token(key=new_key("ES256"), sub=f"y{n}")),
                "invalid_grant")
    assert issuer.jwks_fetches() == 2
    assert state() == before


def test_a_rotated_key_within_the_refetch_interval_waits_for_the_gate(
        client: Client, issuer: TestIssuer, site_client: tuple[str, str]) -> None:
    assert exchange(client, site_client, issuer.token()).status_code == 200
    issuer.rotate()
    refused(exchange(client, site_client, issuer.token(sub="b")), "invalid_grant")
    assert issuer.jwks_fetches() == 1  # the gate of the first fetch is still closed
    a_minute_later(issuer)
    assert exchange(client, site_client, issuer.token(sub="b")).status_code == 200
    assert issuer.jwks_fetches() == 2


def test_jwks_unreachable_is_temporarily_unavailable(client: Client, issuer: TestIssuer,
                                                     site_client: tuple[str, str]) -> None:
    issuer.available = False
    refused(exchange(client, site_client, issuer.token()), "temporarily_unavailable", 503)
    assert issuer.jwks_fetches() == 1
    refused(exchange(client, site_client, issuer.token()), "temporarily_unavailable", 503)
    assert issuer.jwks_fetches() == 1  # not hammered
    issuer.stop()
    assert state() == (0, 0, 0)


def test_an_issuer_that_does_not_listen_is_temporarily_unavailable(
        client: Client, settings: Any, site_client: tuple[str, str]) -> None:
    server = TestIssuer()
    token = server.token()
    server.stop()
    settings.RTC_TRUSTED_ISSUERS = [server.config()]
    refused(exchange(client, site_client, token), "temporarily_unavailable", 503)
    assert state() == (0, 0, 0)


def test_an_algorithm_the_issuer_does_not_allow_is_refused(
        client: Client, settings: Any, issuer: TestIssuer, site_client: tuple[str, str]) -> None:
    settings.RTC_TRUSTED_ISSUERS = [issuer.config(algorithms=["ES256"])]
    refused(exchange(client, site_client, issuer.token()), "invalid_grant")
    assert issuer.requests == []
    assert state() == (0, 0, 0)


# --- request and client errors --------------------------------------------------------------


def test_client_authentication_errors(client: Client, issuer: TestIssuer,
                                      site_client: tuple[str, str]) -> None:
    token = issuer.token()
    res = exchange(client, None, token)
    refused(res, "invalid_client", 401)
    refused(exchange(client, (site_client[0], "wrong"), token), "invalid_client", 401)
    res = exchange(client, ("nobody", "x"), token)
    refused(res, "invalid_client", 401)
    assert res["WWW-Authenticate"].startswith("Basic")
    OAuthClient.objects.filter(client_id=site_client[0]).update(is_active=False)
    refused(exchange(client, site_client, token), "invalid_client", 401)
    assert state() == (0, 0, 0)


def test_a_client_without_the_grant_is_unauthorized(client: Client, issuer: TestIssuer) -> None:
    row, secret = oauth_client_create(name="pkce only", grants=["authorization-code"])
    refused(exchange(client, (row.client_id, secret), issuer.token()), "unauthorized_client")
    row, _ = oauth_client_create(name="public", public=True)
    res = client.post("/oauth2/token", data=_urlencode({
        "grant_type": EXCHANGE, "client_id": row.client_id, "subject_token": issuer.token(),
        "subject_token_type": JWT_TYPE}), content_type="application/x-www-form-urlencoded")
    refused(res, "unauthorized_client")  # public clients: only this server's own tokens
    assert state() == (0, 0, 0)


def test_request_errors(client: Client, issuer: TestIssuer,
                        site_client: tuple[str, str]) -> None:
    token = issuer.token()
    refused(exchange(client, site_client, token, grant_type="password"), "unsupported_grant_type")
    refused(exchange(client, site_client, token, grant_type="urn:example:unknown"),
            "unsupported_grant_type")
    # a grant that exists, but this client is not registered for it
    refused(exchange(client, site_client, token, grant_type="authorization_code"),
            "unauthorized_client")
    refused(exchange(client, site_client, token, subject_token_type="urn:x"), "invalid_request")
    refused(exchange(client, site_client, "", subject_token_type=JWT_TYPE), "invalid_request")
    refused(exchange(client, site_client, token, requested_token_type=(
        "urn:ietf:params:oauth:token-type:refresh_token")), "invalid_request")
    refused(exchange(client, site_client, token, audience="other-service"), "invalid_target")
    res = client.post("/oauth2/token", data=json.dumps({"grant_type": EXCHANGE}),
                      content_type="application/json")
    refused(res, "invalid_request")
    assert state() == (0, 0, 0)
    ok = exchange(client, site_client, token, audience="rtcagent",
                  requested_token_type=ACCESS_TYPE)
    assert ok.status_code == 200


# --- our own tokens, the admin token and delegation ----------------------------------------


def test_admin_token_exchanges_for_the_staff_users_own_token(client: Client,
                                                             make_user: Any) -> None:
    staff = make_user(is_staff=True)
    admin = admin_token_issue(user=staff, device_id="adm-1")
    # The admin token itself is no access token.
    from apps.accounts.tokens import TokenInvalid

    with pytest.raises(TokenInvalid):
        decode_access_token(admin)
    res = client.post("/oauth2/token", data=_urlencode({
        "grant_type": EXCHANGE, "client_id": "rtcagent-admin", "subject_token": admin,
        "subject_token_type": JWT_TYPE}), content_type="application/x-www-form-urlencoded")
    assert res.status_code == 200, res.content
    claims = decode_access_token(res.json()["access_token"])
    assert (claims["sub"], claims["device_id"]) == (str(staff.pk), "adm-1")
    assert Device.objects.filter(user=staff, device_id="adm-1").exists()


def test_admin_tokens_of_non_staff_or_revoked_users_are_refused(client: Client,
                                                                make_user: Any) -> None:
    from apps.accounts.services import user_revoke_tokens

    plain = make_user()
    staff = make_user(is_staff=True)
    for token in (admin_token_issue(user=plain), ):
        res = client.post("/oauth2/token", data=_urlencode({
            "grant_type": EXCHANGE, "client_id": "rtcagent-admin", "subject_token": token,
            "subject_token_type": JWT_TYPE}), content_type="application/x-www-form-urlencoded")
        refused(res, "invalid_grant")
    token = admin_token_issue(user=staff)
    time.sleep(1.01)
    user_revoke_tokens(user_id=staff.pk)
    res = client.post("/oauth2/token", data=_urlencode({
        "grant_type": EXCHANGE, "client_id": "rtcagent-admin", "subject_token": token,
        "subject_token_type": JWT_TYPE}), content_type="application/x-www-form-urlencoded")
    refused(res, "invalid_grant")
    assert Device.objects.count() == 0


def test_delegation_records_the_staff_actor_in_act(client: Client, issuer: TestIssuer,
                                                   make_user: Any,
                                                   site_client: tuple[str, str]) -> None:
    staff = make_user(is_staff=True)
    res = exchange(client, site_client, issuer.token(),
                   actor_token=admin_token_issue(user=staff), actor_token_type=JWT_TYPE)
    assert res.status_code == 200, res.content
    claims = decode_access_token(res.json()["access_token"])
    assert claims["act"] == {"sub": str(staff.pk), "iss": "rtcagent"}
    assert claims["sub"] != str(staff.pk)


def test_delegation_refuses_non_staff_and_foreign_actors(client: Client, issuer: TestIssuer,
                                                         make_user: Any,
                                                         site_client: tuple[str, str]) -> None:
    plain = make_user()
    for actor in (admin_token_issue(user=plain), issue_access_token(plain),
                  issuer.token(sub="admin")):
        refused(exchange(client, site_client, issuer.token(), actor_token=actor,
                         actor_token_type=JWT_TYPE), "invalid_grant")
    assert state() == (1, 0, 0)


def test_our_own_access_token_exchanges_for_a_capped_one(client: Client, make_user: Any,
                                                         site_client: tuple[str, str],
                                                         settings: Any) -> None:
    settings.RTC_EXCHANGE_MAX_MINUTES = 2
    user = make_user()
    res = exchange(client, site_client, issue_access_token(user, device_id="d9"))
    assert res.status_code == 200, res.content
    assert res.json()["expires_in"] == 120
    claims = decode_access_token(res.json()["access_token"])
    assert claims["exp"] - claims["iat"] == 120
    assert claims["device_id"] == "d9"


# --- refresh tokens from an exchange (RFC 8693 §2.2.1, "where allowed") ----------------------


def test_a_confidential_client_gets_a_refresh_token_of_a_new_family(
        client: Client, issuer: TestIssuer, site_client: tuple[str, str]) -> None:
    res = exchange(client, site_client, issuer.token())
    assert res.status_code == 200, res.content
    body = res.json()
    access = decode_access_token(body["access_token"])
    refresh = jwt.decode(body["refresh_token"], options={"verify_signature": False})
    family = TokenFamily.objects.get()
    assert (str(family.user_id), family.device_id) == (access["sub"], "dev-1")
    assert refresh["fid"] == access["fid"] == str(family.pk)
    assert (refresh["sub"], refresh["device_id"]) == (access["sub"], "dev-1")
    bearer = {"HTTP_AUTHORIZATION": "Bearer " + body["access_token"]}
    assert client.get("/api/auth/me/", **bearer).status_code == 200
    # The site's backend refreshes instead of exchanging again: rotation in the same family.
    rotated = client.post("/api/auth/token/refresh/", {"refresh": body["refresh_token"]},
                          content_type="application/json")
    assert rotated.status_code == 200, rotated.content
    again = decode_access_token(rotated.json()["access"])
    assert (again["sub"], again["device_id"], again["fid"]) == (
        access["sub"], "dev-1", str(family.pk))
    # Revoking the refresh token ends the exchanged access token too.
    assert client.post("/oauth2/revoke", data=_urlencode({"token": rotated.json()["refresh"]}),
                       content_type="application/x-www-form-urlencoded").status_code == 200
    assert client.get("/api/auth/me/", **bearer).status_code == 401


def test_public_clients_and_delegation_get_no_refresh_token(
        client: Client, issuer: TestIssuer, make_user: Any,
        site_client: tuple[str, str]) -> None:
    user = make_user()
    row, _ = oauth_client_create(name="spa", public=True,
                                 grants=[OAuthClient.Grant.TOKEN_EXCHANGE])
    res = client.post("/oauth2/token", data=_urlencode({
        "grant_type": EXCHANGE, "client_id": row.client_id, "subject_token_type": JWT_TYPE,
        "subject_token": issue_access_token(user, device_id="d1")}),
        content_type="application/x-www-form-urlencoded")
    assert res.status_code == 200, res.content
    assert "refresh_token" not in res.json()
    assert "fid" not in decode_access_token(res.json()["access_token"])
    staff = make_user(is_staff=True)
    admin = client.post("/oauth2/token", data=_urlencode({
        "grant_type": EXCHANGE, "client_id": "rtcagent-admin", "subject_token_type": JWT_TYPE,
        "subject_token": admin_token_issue(user=staff)}),
        content_type="application/x-www-form-urlencoded")
    assert admin.status_code == 200 and "refresh_token" not in admin.json()
    delegated = exchange(client, site_client, issuer.token(),
                         actor_token=admin_token_issue(user=staff), actor_token_type=JWT_TYPE)
    assert delegated.status_code == 200 and "refresh_token" not in delegated.json()
    assert not TokenFamily.objects.exists()


# --- clients from the command line ----------------------------------------------------------


def test_oauth_client_command_prints_id_and_secret(client: Client, issuer: TestIssuer) -> None:
    out = StringIO()
    call_command("oauth_client", "create", "--name", "site", stdout=out)
    created = json.loads(out.getvalue())
    assert set(created) == {"client_id", "client_secret"}
    row = OAuthClient.objects.get(client_id=created["client_id"])
    assert created["client_secret"] not in row.secret_hash
    assert exchange(client, (created["client_id"], created["client_secret"]),
                    issuer.token()).status_code == 200
    out = StringIO()
    call_command("oauth_client", "create", "--name", "spa", "--public", "--grant",
                 "authorization-code", "--redirect-uri", "https://spa.example/cb", stdout=out)
    public = json.loads(out.getvalue())
    assert set(public) == {"client_id"}
    row = OAuthClient.objects.get(client_id=public["client_id"])
    assert (row.public, row.grants, row.redirect_uris) == (
        True, ["authorization-code"], ["https://spa.example/cb"])
