"""OAuth2 authorization code with PKCE against a live Daphne, with urllib and a cookie jar as the
browser: authorize → login page → credentials → redirect with a code → token exchange. Every
refusal checks that no code, login (family) or device was created."""

from __future__ import annotations

import base64
import hashlib
import http.cookiejar
import json
import re
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
from django.utils import timezone

from apps.accounts.clients import oauth_client_create
from apps.accounts.models import AuthorizationCode, Device, OAuthClient, TokenFamily
from tests.livesrv import LiveServer, start_daphne

pytestmark = [pytest.mark.django_db(transaction=True)]

REDIRECT = "http://127.0.0.1:8765/app/callback"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_daphne(tmp_path_factory.mktemp("web"))
    yield server
    server.stop()


@pytest.fixture
def spa(settings: Any) -> str:
    client, _ = oauth_client_create(
        name="static spa", public=True, grants=[OAuthClient.Grant.AUTHORIZATION_CODE],
        redirect_uris=[REDIRECT, "https://spa.example/cb?tenant=1"],
    )
    return client.client_id


@pytest.fixture
def user(settings: Any) -> Any:
    # Daphne verifies with the project's hashers, not the fast MD5 of the accounts conftest.
    from django.contrib.auth import get_user_model

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    return get_user_model().objects.create_user("pkce@example.com", PASSWORD)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Answer:
    status: int
    headers: Any
    body: str

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def location(self) -> str:
        return self.headers.get("Location") or ""


class Browser:
    """urllib with cookies and without following redirects."""

    def __init__(self, server: LiveServer) -> None:
        self.base = server.http_url
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect()
        )

    def request(self, path: str, *, form: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> Answer:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 of the test server
            self.base + path, data=data, headers=headers or {}
        )
        if data is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with self.opener.open(req, timeout=10) as res:
                return Answer(res.status, res.headers, res.read().decode())
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.headers, exc.read().decode())

    def csrf(self) -> str:
        return next(c.value for c in self.jar if c.name == "csrftoken")


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorize_path(client_id: str, challenge: str, **over: str | None) -> str:
    params: dict[str, str | None] = {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
        "code_challenge": challenge, "code_challenge_method": "S256", "state": "st-42",
        "device_id": "dev-pkce-1",
    }
    params.update(over)
    return "/oauth2/authorize?" + urllib.parse.urlencode(
        {k: v for k, v in params.items() if v is not None}
    )


def login(browser: Browser, path: str, *, password: str = PASSWORD) -> Answer:
    page = browser.request(path)
    assert page.status == 200, page.body
    return browser.request(path, form={
        "csrfmiddlewaretoken": browser.csrf(), "username": "PKCE@example.com",
        "password": password, "action": "login",
    })


def query_of(location: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))


def token(browser: Browser, **form: str) -> Answer:
    return browser.request("/oauth2/token", form=form)


def code_flow(browser: Browser, spa: str, **over: str | None) -> tuple[str, str]:
    verifier, challenge = pkce_pair()
    answer = login(browser, authorize_path(spa, challenge, **over))
    assert answer.status == 302, answer.body
    return query_of(answer.location)["code"], verifier


def exchange(browser: Browser, spa: str, code: str, verifier: str, **over: str) -> Answer:
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
            "client_id": spa, "code_verifier": verifier, **over}
    return token(browser, **form)


def nothing_issued() -> None:
    assert TokenFamily.objects.count() == 0
    assert Device.objects.count() == 0


# --- the flow ---------------------------------------------------------------------------------


def test_pkce_flow_end_to_end(web: LiveServer, spa: str, user: Any) -> None:
    browser = Browser(web)
    verifier, challenge = pkce_pair()
    path = authorize_path(spa, challenge)
    page = browser.request(path)
    assert page.status == 200
    assert 'name="csrfmiddlewaretoken"' in page.body and "static spa" in page.body
    csp = page.headers["Content-Security-Policy"]
    assert re.search(r"form-action 'self' http://127\.0\.0\.1:8765(;|$)", csp), csp
    assert AuthorizationCode.objects.count() == 0

    answer = browser.request(path, form={
        "csrfmiddlewaretoken": browser.csrf(), "username": "PKCE@example.com",
        "password": PASSWORD, "action": "login",
    })
    assert answer.status == 302
    assert answer.location.startswith(REDIRECT + "?code=")
    params = query_of(answer.location)
    assert set(params) == {"code", "state"} and params["state"] == "st-42"
    row = AuthorizationCode.objects.get()
    assert row.code_hash == hashlib.sha256(params["code"].encode()).hexdigest()
    assert (row.client_id, row.user_id, row.device_id, row.used_at) == (
        spa, user.pk, "dev-pkce-1", None)
    assert 0 < (row.expires_at - timezone.now()).total_seconds() <= 60

    res = exchange(browser, spa, params["code"], verifier)
    assert res.status == 200, res.body
    assert res.headers["Cache-Control"] == "no-store"
    body = res.json()
    assert set(body) == {"access_token", "token_type", "expires_in", "refresh_token"}
    assert body["token_type"] == "Bearer" and body["expires_in"] == 15 * 60
    claims = jwt.decode(body["access_token"], options={"verify_signature": False})
    assert (claims["sub"], claims["device_id"]) == (str(user.pk), "dev-pkce-1")
    family = TokenFamily.objects.get()
    assert (claims["fid"], family.device_id) == (str(family.pk), "dev-pkce-1")
    assert Device.objects.filter(user=user, device_id="dev-pkce-1").count() == 1
    me = browser.request("/api/auth/me/",
                         headers={"Authorization": f"Bearer {body['access_token']}"})
    assert (me.status, me.json()["id"]) == (200, user.pk)

    # Refresh: grant_type=refresh_token on /oauth2/token, and /oauth2/refresh, each rotating.
    again = token(browser, grant_type="refresh_token", refresh_token=body["refresh_token"],
                  client_id=spa)
    assert again.status == 200, again.body
    second = again.json()
    assert jwt.decode(second["access_token"],
                      options={"verify_signature": False})["device_id"] == "dev-pkce-1"
    alias = browser.request("/oauth2/refresh", form={"refresh_token": second["refresh_token"],
                                                     "client_id": spa})
    assert alias.status == 200 and set(alias.json()) == set(body)
    used = browser.request("/oauth2/refresh", form={"refresh_token": body["refresh_token"],
                                                    "client_id": spa})
    assert (used.status, used.json()["error"]) == (400, "invalid_grant")


def test_a_logged_in_user_continues_without_a_password(
    web: LiveServer, spa: str, user: Any
) -> None:
    browser = Browser(web)
    code_flow(browser, spa)
    _, challenge = pkce_pair()
    path = authorize_path(spa, challenge, state="second")
    page = browser.request(path)
    assert "Continue as pkce@example.com" in page.body
    answer = browser.request(path, form={"csrfmiddlewaretoken": browser.csrf(),
                                         "action": "continue"})
    assert answer.status == 302 and query_of(answer.location)["state"] == "second"
    assert AuthorizationCode.objects.count() == 2


def test_login_post_without_csrf_is_refused(web: LiveServer, spa: str, user: Any) -> None:
    browser = Browser(web)
    _, challenge = pkce_pair()
    answer = browser.request(authorize_path(spa, challenge), form={
        "username": "pkce@example.com", "password": PASSWORD, "action": "login"})
    assert answer.status == 403 and not answer.location
    assert AuthorizationCode.objects.count() == 0


def test_wrong_password_shows_the_form_again(web: LiveServer, spa: str, user: Any) -> None:
    browser = Browser(web)
    _, challenge = pkce_pair()
    answer = login(browser, authorize_path(spa, challenge), password="nope")
    assert answer.status == 200 and 'role="alert"' in answer.body and not answer.location
    assert AuthorizationCode.objects.count() == 0


def test_cancel_redirects_with_access_denied(web: LiveServer, spa: str, user: Any) -> None:
    browser = Browser(web)
    _, challenge = pkce_pair()
    path = authorize_path(spa, challenge)
    browser.request(path)
    answer = browser.request(path, form={"csrfmiddlewaretoken": browser.csrf(),
                                         "action": "cancel"})
    assert answer.status == 302
    assert answer.location == REDIRECT + "?error=access_denied&state=st-42"
    assert AuthorizationCode.objects.count() == 0


def test_a_registered_uri_with_a_query_keeps_it(web: LiveServer, spa: str, user: Any) -> None:
    browser = Browser(web)
    _, challenge = pkce_pair()
    answer = login(browser, authorize_path(spa, challenge,
                                           redirect_uri="https://spa.example/cb?tenant=1"))
    assert answer.location.startswith("https://spa.example/cb?tenant=1&code=")


# --- redirect URIs: an error page, never a redirect ------------------------------------------


@pytest.mark.parametrize("redirect_uri", [
    "http://evil.example:8765/app/callback",      # other host
    "http://localhost:8765/app/callback",         # other host, same machine
    "http://127.0.0.1:8766/app/callback",         # other port
    "http://127.0.0.1/app/callback",              # no port
    "https://127.0.0.1:8765/app/callback",        # other scheme
    REDIRECT + "/",                               # trailing slash
    REDIRECT + "/more",                           # extra path
    "http://127.0.0.1:8765/app/callbackx",        # prefix
    "http://127.0.0.1:8765/app",                  # shorter
    REDIRECT + "?x=1",                            # extra query
    REDIRECT + "?",                               # empty query
    REDIRECT + "#frag",                           # fragment
    "http://127.0.0.1:8765/App/Callback",         # case change in path
    "HTTP://127.0.0.1:8765/app/callback",         # case change in scheme
    "http://127.0.0.1:8765/app/%63allback",       # percent-encoded
    "https://spa.example/cb",                     # registered one without its query
    "https://spa.example/cb?tenant=2",            # other query value
    "",                                           # empty
    None,                                         # missing
])
def test_unregistered_redirect_uris_get_an_error_page(
    web: LiveServer, spa: str, user: Any, redirect_uri: str | None
) -> None:
    browser = Browser(web)
    _, challenge = pkce_pair()
    path = authorize_path(spa, challenge, redirect_uri=redirect_uri)
    page = browser.request(path)
    assert (page.status, page.location) == (400, "")
    assert "The redirect URI is not registered for this client." in page.body
    # Posting credentials does not help either.
    posted = browser.request(path, form={"username": "pkce@example.com", "password": PASSWORD,
                                         "csrfmiddlewaretoken": "x", "action": "login"})
    assert posted.status in (400, 403) and posted.location == ""
    assert AuthorizationCode.objects.count() == 0
    nothing_issued()


@pytest.mark.parametrize("client_id", ["", "rtc_unknown", "rtcagent-admin"])
def test_unknown_clients_get_an_error_page(
    web: LiveServer, spa: str, client_id: str
) -> None:
    _, challenge = pkce_pair()
    page = Browser(web).request(authorize_path(client_id, challenge))
    assert (page.status, page.location) == (400, "")
    assert "Unknown client" in page.body


def test_a_client_without_the_grant_gets_an_error_page(web: LiveServer) -> None:
    client, _ = oauth_client_create(name="exchange only", public=True, redirect_uris=[REDIRECT])
    _, challenge = pkce_pair()
    page = Browser(web).request(authorize_path(client.client_id, challenge))
    assert (page.status, page.location) == (400, "")


def test_an_inactive_client_gets_an_error_page(web: LiveServer, spa: str) -> None:
    OAuthClient.objects.filter(client_id=spa).update(is_active=False)
    _, challenge = pkce_pair()
    page = Browser(web).request(authorize_path(spa, challenge))
    assert (page.status, page.location) == (400, "")


# --- errors sent back to a valid redirect URI (RFC 6749 §4.1.2.1) ------------------------------


@pytest.mark.parametrize(("over", "error"), [
    ({"code_challenge": None}, "invalid_request"),
    ({"code_challenge_method": None}, "invalid_request"),
    ({"code_challenge_method": "plain"}, "invalid_request"),
    ({"code_challenge_method": "s256"}, "invalid_request"),
    ({"code_challenge": "short"}, "invalid_request"),
    ({"response_type": "token"}, "unsupported_response_type"),
    ({"response_type": None}, "unsupported_response_type"),
    ({"device_id": "bad id!"}, "invalid_request"),
])
def test_bad_requests_redirect_with_an_error_and_the_state(
    web: LiveServer, spa: str, user: Any, over: dict[str, str | None], error: str
) -> None:
    _, challenge = pkce_pair()
    page = Browser(web).request(authorize_path(spa, challenge, **over))
    assert page.status == 302
    assert page.location.startswith(REDIRECT + "?error=" + error + "&")
    params = query_of(page.location)
    assert params["state"] == "st-42" and "code" not in params
    assert AuthorizationCode.objects.count() == 0


# --- the token endpoint ----------------------------------------------------------------------


def test_a_reused_code_is_refused_and_revokes_what_it_issued(
    web: LiveServer, spa: str, user: Any
) -> None:
    browser = Browser(web)
    code, verifier = code_flow(browser, spa)
    first = exchange(browser, spa, code, verifier).json()
    again = exchange(browser, spa, code, verifier)
    assert (again.status, again.json()["error"]) == (400, "invalid_grant")
    family = TokenFamily.objects.get()
    assert (family.revoked_reason, family.revoked_at is not None) == ("code_reuse", True)
    me = browser.request("/api/auth/me/",
                         headers={"Authorization": f"Bearer {first['access_token']}"})
    assert me.status == 401
    refreshed = token(browser, grant_type="refresh_token", client_id=spa,
                      refresh_token=first["refresh_token"])
    assert (refreshed.status, refreshed.json()["error"]) == (400, "invalid_grant")
    assert TokenFamily.objects.count() == 1


@pytest.mark.parametrize("case", [
    "wrong_verifier", "missing_verifier", "short_verifier", "other_redirect", "unknown_code",
    "other_client", "expired", "other_device", "inactive_user",
])
def test_refused_exchanges_issue_nothing(
    web: LiveServer, spa: str, user: Any, case: str
) -> None:
    browser = Browser(web)
    code, verifier = code_flow(browser, spa)
    over: dict[str, str] = {}
    expected = "invalid_grant"
    if case == "wrong_verifier":
        over["code_verifier"] = pkce_pair()[0]
    elif case == "missing_verifier":
        over["code_verifier"], expected = "", "invalid_request"
    elif case == "short_verifier":
        over["code_verifier"], expected = "a" * 42, "invalid_request"
    elif case == "other_redirect":
        over["redirect_uri"] = "https://spa.example/cb?tenant=1"
    elif case == "unknown_code":
        over["code"] = code + "x"
    elif case == "other_client":
        other, _ = oauth_client_create(name="other", public=True, redirect_uris=[REDIRECT],
                                       grants=[OAuthClient.Grant.AUTHORIZATION_CODE])
        over["client_id"] = other.client_id
    elif case == "expired":
        AuthorizationCode.objects.update(expires_at=timezone.now())
    elif case == "other_device":
        over["device_id"] = "dev-other"
    elif case == "inactive_user":
        type(user).objects.filter(pk=user.pk).update(is_active=False)
    res = exchange(browser, spa, over.pop("code", code), verifier, **over)
    assert (res.status, res.json()["error"]) == (400, expected), res.body
    nothing_issued()
    assert AuthorizationCode.objects.get().used_at is None


def test_client_authentication_on_the_code_grant(web: LiveServer, spa: str, user: Any) -> None:
    browser = Browser(web)
    code, verifier = code_flow(browser, spa)
    with_secret = exchange(browser, spa, code, verifier, client_secret="s")
    assert (with_secret.status, with_secret.json()["error"]) == (401, "invalid_client")
    exchanger, secret = oauth_client_create(name="backend")
    wrong = exchange(browser, exchanger.client_id, code, verifier, client_secret=secret)
    assert (wrong.status, wrong.json()["error"]) == (400, "unauthorized_client")
    nothing_issued()


def test_providers_lists_the_local_login(web: LiveServer) -> None:
    res = Browser(web).request("/oauth2/providers")
    assert res.status == 200
    assert res.json() == {"providers": [{
        "name": "local", "type": "local", "title": "Account on this server",
        "authorize_url": web.http_url + "/oauth2/authorize"}]}
