"""Limits of the OAuth endpoints: the ``oauth`` rate on ``/oauth2/token`` and ``/oauth2/revoke``
(per named client, else per address; 429 ``slow_down`` with ``Retry-After``) and the purge of
expired refresh-token records, authorization codes and dead families."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from apps.accounts.clients import oauth_client_create

pytestmark = pytest.mark.django_db

FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def low_rate(settings: Any) -> None:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {
        **settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "oauth": "3/min"}}


def _basic(client_id: str, secret: str) -> dict[str, str]:
    raw = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {raw}"}


def _token(http: Client, headers: dict[str, str], **form: str) -> Any:
    return http.post("/oauth2/token", data=urlencode({"grant_type": "password", **form}),
                     content_type=FORM, **headers)


def test_token_endpoint_throttled_per_client(low_rate: None) -> None:
    http = Client()
    one, one_secret = oauth_client_create(name="one")
    two, two_secret = oauth_client_create(name="two")
    for _ in range(3):
        assert _token(http, _basic(one.client_id, one_secret)).status_code == 400
    over = _token(http, _basic(one.client_id, one_secret))
    assert over.status_code == 429
    assert over.json()["error"] == "slow_down"
    assert 1 <= int(over["Retry-After"]) <= 60
    assert over["Cache-Control"] == "no-store"
    # The same client named in the form counts against the same budget.
    assert _token(http, {}, client_id=one.client_id).status_code == 429
    # Another client, from the same address, is unaffected.
    assert _token(http, _basic(two.client_id, two_secret)).status_code == 400


def test_anonymous_requests_throttled_per_address(low_rate: None) -> None:
    http = Client()
    for _ in range(3):
        assert _token(http, {"REMOTE_ADDR": "10.0.0.1"}).status_code != 429
    assert _token(http, {"REMOTE_ADDR": "10.0.0.1"}).status_code == 429
    assert http.post("/oauth2/revoke", data=urlencode({"token": "x"}), content_type=FORM,
                     REMOTE_ADDR="10.0.0.1").status_code == 429
    assert http.post("/oauth2/revoke", data=urlencode({"token": "x"}), content_type=FORM,
                     REMOTE_ADDR="10.0.0.2").status_code == 200


def test_revoke_throttled(low_rate: None) -> None:
    http = Client()
    for _ in range(3):
        assert http.post("/oauth2/revoke", data=urlencode({"token": "x"}),
                         content_type=FORM).status_code == 200
    over = http.post("/oauth2/revoke", data=urlencode({"token": "x"}), content_type=FORM)
    assert over.status_code == 429 and over.json()["error"] == "slow_down"
    assert over["Retry-After"]
