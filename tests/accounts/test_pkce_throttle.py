"""The local login page of ``/oauth2/authorize`` is throttled like ``/api/auth/token/``: failed
password posts per client address at the ``auth`` rate; then 429 with the form re-shown and a
message, and no code, even for the right password, while another address still signs in."""

from __future__ import annotations

import base64
import hashlib
import secrets
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from django.test import Client
from rest_framework.settings import api_settings as drf_settings
from rest_framework.throttling import ScopedRateThrottle

from apps.accounts.clients import oauth_client_create
from apps.accounts.models import AuthorizationCode, OAuthClient

pytestmark = [pytest.mark.django_db]

REDIRECT = "http://127.0.0.1:8765/app/callback"
RIGHT = "pw-kim@example.com"  # make_user's password


@pytest.fixture
def authorize_url() -> str:
    client, _ = oauth_client_create(
        name="static spa", public=True, grants=[OAuthClient.Grant.AUTHORIZATION_CODE],
        redirect_uris=[REDIRECT],
    )
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(
        hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return "/oauth2/authorize?" + urlencode({
        "response_type": "code", "client_id": client.client_id, "redirect_uri": REDIRECT,
        "code_challenge": challenge, "code_challenge_method": "S256", "state": "st-1",
    })


def _post(client: Client, url: str, password: str, address: str) -> Any:
    return client.post(url, {"username": "kim@example.com", "password": password,
                             "action": "login"}, REMOTE_ADDR=address)


def test_failed_logins_are_throttled_per_address_with_the_auth_rate(
    client: Client, make_user: Any, authorize_url: str
) -> None:
    make_user("kim@example.com")
    allowed, _ = ScopedRateThrottle().parse_rate(drf_settings.DEFAULT_THROTTLE_RATES["auth"])
    assert allowed == 30
    for _ in range(allowed):
        answer = _post(client, authorize_url, "wrong", "203.0.113.5")
        assert answer.status_code == 200
        assert b'id="login-form"' in answer.content and b'id="throttled"' not in answer.content

    throttled = _post(client, authorize_url, RIGHT, "203.0.113.5")
    assert throttled.status_code == 429
    body = throttled.content.decode()
    assert 'id="login-form"' in body and 'id="throttled"' in body
    assert "Too many failed sign-ins" in body
    assert "no-cache" in throttled["Cache-Control"]  # never_cache
    assert not AuthorizationCode.objects.exists()

    other = _post(Client(), authorize_url, RIGHT, "198.51.100.9")
    assert other.status_code == 302
    query = dict(parse_qsl(urlsplit(other["Location"]).query))
    assert query["state"] == "st-1" and query["code"]
    assert AuthorizationCode.objects.count() == 1


def test_successful_logins_do_not_count(client: Client, make_user: Any,
                                        authorize_url: str) -> None:
    make_user("kim@example.com")
    for _ in range(40):
        assert _post(Client(), authorize_url, RIGHT, "203.0.113.6").status_code == 302
    assert _post(client, authorize_url, "wrong", "203.0.113.6").status_code == 200
