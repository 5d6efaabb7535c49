"""Upstream login providers of ``/oauth2/authorize`` against a live Daphne and a real upstream
OIDC provider (a threaded HTTP server with ``/authorize``, ``/token`` and a JWKS): the whole
flow ends with our tokens for the upstream user; each refusal writes nothing."""

from __future__ import annotations

import json
import secrets
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from django.contrib.auth import get_user_model

from apps.accounts.clients import oauth_client_create
from apps.accounts.models import AuthorizationCode, ExternalIdentity, OAuthClient, OAuthProvider
from tests.accounts import test_pkce
from tests.accounts.issuer import TestIssuer, new_key
from tests.accounts.test_pkce import (
    REDIRECT,
    Browser,
    authorize_path,
    pkce_pair,
    query_of,
)
from tests.livesrv import LiveServer, free_port

pytestmark = [pytest.mark.django_db(transaction=True)]

web = test_pkce.web  # the live Daphne (module scope)
CLIENT_ID = "rtcagent-at-upstream"
SECRET = "upstream-secret-" + "x" * 16


class Upstream(TestIssuer):
    """An OIDC provider: the test issuer's key and JWKS, plus ``/authorize`` (redirects straight
    back with a code) and ``/token`` (an id_token signed with its key; ``tamper`` changes its
    claims, ``forge`` signs it with another key, ``token_down`` answers 503). As a plain OAuth2
provider (``plain``): no id_token, ``/userinfo`` answers ``userinfo`` for the access token it
issued (401 for any other bearer; ``userinfo_down`` answers 503, ``userinfo_body`` replaces
the JSON, ``wrong_bearer`` issues access tokens it does not know)."""

    def __init__(self) -> None:
        super().__init__("ES256")
        self.codes: dict[str, dict[str, str]] = {}
        self.tamper: dict[str, Any] = {}
        self.forge = False
        self.token_down = False
        self.token_forms: list[dict[str, str]] = []
        self.plain = False
        self.access_tokens: set[str] = set()
        self.userinfo: dict[str, Any] = {"id": 4242, "login": "uma", "name": "Uma Upstream",
                                         "email": "uma@upstream.example"}
        self.userinfo_down = False
        self.userinfo_body: bytes | None = None
        self.wrong_bearer = False
        self.userinfo_auth: list[str] = []
        up = self

        class Handler(self.server.RequestHandlerClass):  # type: ignore[name-defined,misc]
            def _send(self, status: int, body: bytes = b"", location: str = "") -> None:
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                if parts.path == "/userinfo":
                    auth = self.headers.get("Authorization") or ""
                    up.userinfo_auth.append(auth)
                    if up.userinfo_down:
                        return self._send(503)
                    if auth.removeprefix("Bearer ") not in up.access_tokens:
                        return self._send(401, b'{"message": "Bad credentials"}')
                    return self._send(200, up.userinfo_body if up.userinfo_body is not None
                                      else json.dumps(up.userinfo).encode())
                if parts.path != "/authorize":
                    return super().do_GET()
                q = dict(urllib.parse.parse_qsl(parts.query))
                code = secrets.token_urlsafe(16)
                up.codes[code] = q
                return self._send(302, location=q["redirect_uri"] + "?" + urllib.parse.urlencode(
                    {"code": code, "state": q["state"]}))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                up.token_forms.append(form)
                if up.token_down:
                    return self._send(503)
                q = up.codes.pop(form.get("code", ""), None)
                if (q is None or form.get("client_secret") != SECRET
                        or form.get("redirect_uri") != q["redirect_uri"]):
                    return self._send(400, b'{"error": "invalid_grant"}')
                if up.plain:
                    access = "gho_" + secrets.token_urlsafe(16)
                    if not up.wrong_bearer:
                        up.access_tokens.add(access)
                    return self._send(200, json.dumps({"access_token": access, "scope": "user",
                                                       "token_type": "bearer"}).encode())
                claims = {"aud": CLIENT_ID, "sub": "up-123", "email": "uma@upstream.example",
                          "email_verified": True, "name": "Uma Upstream", "nonce": q["nonce"],
                          "device_id": None, **up.tamper}
                id_token = up.token(key=new_key("ES256") if up.forge else None,
                                    headers={"kid": up.signing.kid}, **claims)
                return self._send(200, json.dumps({"access_token": "upstream-at",
                                                   "token_type": "Bearer",
                                                   "id_token": id_token}).encode())

        self.server.RequestHandlerClass = Handler


@pytest.fixture
def up() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.fixture
def spa(up: Upstream) -> str:
    client, _ = oauth_client_create(
        name="static spa", public=True, grants=[OAuthClient.Grant.AUTHORIZATION_CODE],
        redirect_uris=[REDIRECT],
    )
    OAuthProvider.objects.create(
        name="upco", label="Upstream Co", authorization_endpoint=up.url + "/authorize",
        token_endpoint=up.url + "/token", client_id=CLIENT_ID, client_secret=SECRET,
        issuer=up.url, jwks_uri=up.url + "/jwks.json",
    )
    return client.client_id


@pytest.fixture
def plain(up: Upstream, spa: str) -> str:
    """The provider as plain OAuth2 (GitHub-like): no issuer/JWKS, a userinfo endpoint."""
    up.plain = True
    OAuthProvider.objects.filter(name="upco").update(
        issuer="", jwks_uri="", userinfo_endpoint=up.url + "/userinfo", scopes="read:user")
    return spa


def _follow(browser: Browser, location: str) -> Any:
    """Follow a redirect on the upstream with plain urllib (no cookies shared with us)."""
    import urllib.request

    from tests.accounts.test_pkce import _NoRedirect

    opener = urllib.request.build_opener(_NoRedirect())
    try:
        opener.open(location, timeout=10)  # the test's own 127.0.0.1 server
    except urllib.error.HTTPError as exc:
        return exc.headers["Location"]
    raise AssertionError("the upstream did not redirect")


def _to_upstream(browser: Browser, client_id: str) -> tuple[str, str]:
    """Login page → provider button → upstream authorize URL; the verifier of our own PKCE."""
    verifier, challenge = pkce_pair()
    page = browser.request(authorize_path(client_id, challenge))
    assert page.status == 200 and "Upstream Co" in page.body
    start = browser.request(authorize_path(client_id, challenge, provider="upco"))
    assert start.status == 302 and start.location.startswith("/oauth2/upstream/upco?")
    answer = browser.request(start.location)
    assert answer.status == 302
    return answer.location, verifier


def _nothing_created(browser: Browser) -> None:
    assert not ExternalIdentity.objects.exists()
    assert not get_user_model().objects.exists()
    assert not AuthorizationCode.objects.exists()


def _callback(browser: Browser, upstream_location: str) -> Any:
    back = _follow(browser, upstream_location)
    return browser.request(back.removeprefix(browser.base))


def _refused(web: LiveServer, client_id: str, message: str) -> Any:
    """A whole login that ends on the 400 error page with ``message``, nothing created."""
    browser = Browser(web)
    answer = _callback(browser, _to_upstream(browser, client_id)[0])
    assert answer.status == 400 and message in answer.body, answer.body
    assert "Location" not in answer.headers
    _nothing_created(browser)
    return answer


def test_providers_lists_local_and_upstream(web: LiveServer, spa: str) -> None:
    answer = Browser(web).request("/oauth2/providers")
    names = [p["name"] for p in answer.json()["providers"]]
    assert names == ["local", "upco"]
    assert "client_secret" not in answer.body and SECRET not in answer.body


def test_whole_flow_ends_with_our_tokens(web: LiveServer, spa: str, up: Upstream) -> None:
    browser = Browser(web)
    location, verifier = _to_upstream(browser, spa)
    q = query_of(location)
    assert location.startswith(up.url + "/authorize?")
    assert q["client_id"] == CLIENT_ID and q["code_challenge_method"] == "S256"
    assert q["redirect_uri"] == web.http_url + "/oauth2/callback/upco" and q["nonce"]
    callback = _callback(browser, location)
    assert callback.status == 302, callback.body
    assert callback.location.startswith("/oauth2/authorize?")
    final = browser.request(callback.location)
    assert final.status == 302 and final.location.startswith(REDIRECT + "?")
    result = query_of(final.location)
    assert result["state"] == "st-42"
    assert up.token_forms[-1]["code_verifier"]
    tokens = browser.request("/oauth2/token", form={
        "grant_type": "authorization_code", "code": result["code"], "client_id": spa,
        "redirect_uri": REDIRECT, "code_verifier": verifier,
    })
    assert tokens.status == 200, tokens.body
    access = jwt.decode(tokens.json()["access_token"], options={"verify_signature": False})
    identity = ExternalIdentity.objects.get(issuer=up.url, subject="up-123")
    assert access["sub"] == str(identity.user_id)
    assert identity.user.email == "uma@upstream.example"
    assert tokens.json()["refresh_token"]
    # The marker is one-shot: the same authorize request goes to the provider again, no code.
    again = browser.request(callback.location)
    assert again.status == 302 and again.location.startswith("/oauth2/upstream/upco?")
    assert AuthorizationCode.objects.count() == 1


def test_wrong_state_is_refused(web: LiveServer, spa: str, up: Upstream) -> None:
    browser = Browser(web)
    location, _ = _to_upstream(browser, spa)
    back = _follow(browser, location)
    forged = back.replace("state=", "state=x")
    answer = browser.request(forged.removeprefix(browser.base))
    assert answer.status == 400 and "state" in answer.body
    assert not up.token_forms  # no code exchanged
    _nothing_created(browser)
    # And the state works only in the browser (session) that started the login.
    answer = Browser(web).request(back.removeprefix(browser.base))
    assert answer.status == 400
    _nothing_created(browser)


@pytest.mark.parametrize("tamper", [
    {"nonce": "another"}, {"nonce": None}, {"aud": "someone-else"}, {"iss": "https://evil"},
    {"exp": int(time.time()) - 600},
])
def test_bad_id_token_is_refused(web: LiveServer, spa: str, up: Upstream,
                                 tamper: dict[str, Any]) -> None:
    up.tamper = tamper
    browser = Browser(web)
    location, _ = _to_upstream(browser, spa)
    answer = _callback(browser, location)
    assert answer.status == 400 and "id_token" in answer.body
    assert "Location" not in answer.headers
    _nothing_created(browser)


def test_forged_id_token_is_refused(web: LiveServer, spa: str, up: Upstream) -> None:
    up.forge = True
    _refused(web, spa, "id_token is not valid")


def test_token_endpoint_down_is_refused(web: LiveServer, spa: str, up: Upstream) -> None:
    up.token_down = True
    for message in ("refused", "could not be reached"):
        browser = Browser(web)
        answer = _callback(browser, _to_upstream(browser, spa)[0])
        assert answer.status == 400 and message in answer.body
        _nothing_created(browser)
        OAuthProvider.objects.filter(name="upco").update(
            token_endpoint=f"http://127.0.0.1:{free_port()}/token")  # then nothing listens


def test_next_must_be_our_authorize(web: LiveServer, spa: str) -> None:
    browser = Browser(web)
    for target in ("https://evil.example/", "//evil.example/oauth2/authorize?",
                   "/admin/"):
        answer = browser.request("/oauth2/upstream/upco?" + urllib.parse.urlencode(
            {"next": target}))
        assert answer.status == 400 and "Location" not in answer.headers
    assert browser.request("/oauth2/upstream/nope?next=/oauth2/authorize?x").status == 400


def test_env_providers(settings, up: Upstream) -> None:
    """``RTC_OAUTH_PROVIDERS`` (read by the settings as JSON): valid entries become providers,
    incomplete ones are skipped."""
    from apps.accounts import upstream

    entry = {"name": "kc", "label": "Keycloak", "authorization_endpoint": up.url + "/authorize",
             "token_endpoint": up.url + "/token", "client_id": CLIENT_ID,
             "issuer": up.url, "jwks_uri": up.jwks_uri, "scopes": ["openid", "email"]}
    settings.RTC_OAUTH_PROVIDERS = [entry, {"name": "broken"}]
    found = upstream.providers()
    assert [p.name for p in found] == ["kc"] and found[0].scopes == "openid email"
    assert not found[0].merge_by_email


# --- plain OAuth2 (userinfo endpoint) ---------------------------------------------------------


def test_plain_oauth2_whole_flow(web: LiveServer, plain: str, up: Upstream) -> None:
    browser = Browser(web)
    location, verifier = _to_upstream(browser, plain)
    assert query_of(location)["scope"] == "read:user"
    callback = _callback(browser, location)
    assert callback.status == 302, callback.body
    final = browser.request(callback.location)
    assert final.status == 302 and final.location.startswith(REDIRECT + "?")
    assert up.token_forms[-1]["code_verifier"] and up.token_forms[-1]["client_secret"] == SECRET
    assert up.userinfo_auth == ["Bearer " + next(iter(up.access_tokens))]
    tokens = browser.request("/oauth2/token", form={
        "grant_type": "authorization_code", "code": query_of(final.location)["code"],
        "client_id": plain, "redirect_uri": REDIRECT, "code_verifier": verifier,
    })
    assert tokens.status == 200, tokens.body
    access = jwt.decode(tokens.json()["access_token"], options={"verify_signature": False})
    identity = ExternalIdentity.objects.get()  # GitHub's numeric id, namespaced by the name
    assert (identity.issuer, identity.subject) == ("oauth2-provider:upco", "4242")
    assert access["sub"] == str(identity.user_id)
    assert identity.user.email == "uma@upstream.example"
    assert identity.user.first_name == "Uma Upstream"


def test_plain_oauth2_merges_only_a_verified_email(web: LiveServer, plain: str,
                                                   up: Upstream) -> None:
    existing = get_user_model().objects.create_user("uma@upstream.example", "pw-unused-1")
    OAuthProvider.objects.filter(name="upco").update(merge_by_email=True)
    browser = Browser(web)
    assert _callback(browser, _to_upstream(browser, plain)[0]).status == 302
    identity = ExternalIdentity.objects.get()
    assert identity.user_id != existing.pk  # no email_verified: a new user
    ExternalIdentity.objects.all().delete()
    up.userinfo = {**up.userinfo, "id": 4343, "email_verified": True}
    browser = Browser(web)
    assert _callback(browser, _to_upstream(browser, plain)[0]).status == 302
    assert ExternalIdentity.objects.get(subject="4343").user_id == existing.pk


def test_plain_oauth2_userinfo_down_is_refused(web: LiveServer, plain: str,
                                               up: Upstream) -> None:
    up.userinfo_down = True
    for message in ("refused", "could not be fetched", "not a JSON object"):
        _refused(web, plain, message)
        if message == "refused":  # then nothing listens
            OAuthProvider.objects.filter(name="upco").update(
                userinfo_endpoint=f"http://127.0.0.1:{free_port()}/userinfo")
        else:  # then it answers, but not JSON
            OAuthProvider.objects.filter(name="upco").update(
                userinfo_endpoint=up.url + "/userinfo")
            up.userinfo_down, up.userinfo_body = False, b"<html>hello</html>"


@pytest.mark.parametrize("userinfo", [
    {"login": "uma", "email": "uma@upstream.example"}, {"id": None}, {"id": True},
    {"id": ""}, {"sub": ["x"]},
])
def test_plain_oauth2_missing_subject_is_refused(web: LiveServer, plain: str, up: Upstream,
                                                 userinfo: dict[str, Any]) -> None:
    up.userinfo = userinfo
    _refused(web, plain, "userinfo names no usable subject")


def test_plain_oauth2_wrong_bearer_is_refused(web: LiveServer, plain: str, up: Upstream) -> None:
    up.wrong_bearer = True
    _refused(web, plain, "userinfo endpoint refused")
    assert len(up.userinfo_auth) == 1 and up.userinfo_auth[0].startswith("Bearer gho_")


def test_env_plain_provider(settings, up: Upstream) -> None:
    from apps.accounts import upstream

    entry = {"name": "github", "label": "GitHub", "client_id": CLIENT_ID,
             "authorization_endpoint": "https://github.com/login/oauth/authorize",
             "token_endpoint": "https://github.com/login/oauth/access_token",
             "userinfo_endpoint": "https://api.github.com/user", "scopes": "read:user"}
    settings.RTC_OAUTH_PROVIDERS = [entry, {**entry, "name": "half", "userinfo_endpoint": ""}]
    found = upstream.providers()
    assert [p.name for p in found] == ["github"] and not found[0].oidc
    assert found[0].identity_issuer == "oauth2-provider:github"
