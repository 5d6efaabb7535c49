"""Limits of the OAuth endpoints: the ``oauth`` rate on ``/oauth2/token`` and ``/oauth2/revoke``
(per named client, else per address; 429 ``slow_down`` with ``Retry-After``) and the purge of
expired refresh-token records, authorization codes and dead families."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from apps.accounts.clients import oauth_client_create
from apps.accounts.models import AuthorizationCode, RefreshTokenRecord, TokenFamily
from apps.accounts.services import tokens_purge

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


def _family(user: Any, *, age: timedelta, revoked: timedelta | None = None) -> TokenFamily:
    now = timezone.now()
    return TokenFamily.objects.create(
        user=user, created_at=now - age,
        revoked_at=None if revoked is None else now - revoked,
        revoked_reason="logout" if revoked is not None else "",
    )


def _record(family: TokenFamily, name: str, *, expires_in: timedelta) -> None:
    RefreshTokenRecord.objects.create(jti_hash=name.ljust(64, "0"), family=family,
                                      expires_at=timezone.now() + expires_in)


def _code(user: Any, name: str, *, expires_in: timedelta) -> None:
    AuthorizationCode.objects.create(code_hash=name.ljust(64, "0"), client_id="c", user=user,
                                     redirect_uri="http://x/cb", code_challenge="x",
                                     expires_at=timezone.now() + expires_in)


def test_purge_removes_expired_keeps_live(make_user: Any) -> None:
    user = make_user("purge@example.com")
    day = timedelta(days=1)
    live = _family(user, age=3 * day)
    _record(live, "a", expires_in=day)  # live
    _record(live, "b", expires_in=-2 * day)  # expired two days ago: goes
    _record(live, "c", expires_in=-timedelta(hours=2))  # expired, within the grace: stays
    expired = _family(user, age=20 * day)
    _record(expired, "d", expires_in=-3 * day)  # its last record goes, then the family
    revoked_old = _family(user, age=5 * day, revoked=2 * day)
    _record(revoked_old, "e", expires_in=5 * day)  # revoked two days ago: family and record go
    revoked_new = _family(user, age=5 * day, revoked=timedelta(minutes=5))
    _record(revoked_new, "f", expires_in=5 * day)  # revoked just now: kept for now
    fresh = _family(user, age=timedelta(minutes=1))  # no record yet, but new: kept
    _code(user, "g", expires_in=-2 * day)
    _code(user, "h", expires_in=timedelta(minutes=5))

    done = tokens_purge(batch=1)  # a batch of one: every loop runs more than once

    assert done == {"refresh_tokens": 2, "authorization_codes": 1, "families": 2}
    assert set(RefreshTokenRecord.objects.values_list("jti_hash", flat=True)) == {
        n.ljust(64, "0") for n in ("a", "c", "f")}
    assert set(AuthorizationCode.objects.values_list("code_hash", flat=True)) == {
        "h".ljust(64, "0")}
    assert set(TokenFamily.objects.values_list("pk", flat=True)) == {
        live.pk, revoked_new.pk, fresh.pk}
    assert get_user_model().objects.filter(pk=user.pk).exists()
    assert tokens_purge() == {"refresh_tokens": 0, "authorization_codes": 0, "families": 0}


def test_a_malformed_basic_header_is_invalid_client_not_a_crash(client) -> None:
    for header in ("Basic !!!not-base64", "Basic " + "bm9jb2xvbg=="):  # the second: no colon
        res = client.post("/oauth2/token", "grant_type=x", content_type=FORM,
                          HTTP_AUTHORIZATION=header)
        assert res.status_code in (400, 401), res.content
        assert res.json()["error"] in ("invalid_client", "invalid_request")
