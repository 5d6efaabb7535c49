"""Issuing and verifying tokens (``apps.accounts.tokens``), without HTTP."""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import jwt
import pytest
from django.conf import settings

from apps.accounts.keys import get_keyring
from apps.accounts.tokens import (
    AccessToken,
    RefreshToken,
    TokenExpired,
    TokenInvalid,
    decode_access_token,
    issue_access_token,
    issue_token_pair,
)
from tests.accounts.forge import KINDS, claims, forge, sign_with_ring


def fake_user(pk: int = 42) -> Any:
    # No database row: decode_access_token must not need one.
    return SimpleNamespace(id=pk, pk=pk, is_active=True, password="")


def test_access_token_header_carries_kid_and_configured_algorithm() -> None:
    token = issue_access_token(fake_user())
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "RS256", "kid": get_keyring().signing.kid, "typ": "JWT"}


def test_decode_access_token_returns_verified_claims() -> None:
    before = int(time.time())
    token = issue_access_token(fake_user(42), device_id="dev-1")
    got = decode_access_token(token)
    assert got["sub"] == "42"
    assert got["device_id"] == "dev-1"
    assert got["token_type"] == "access"
    assert got["aud"] == settings.SIMPLE_JWT["AUDIENCE"] == "rtcagent"
    assert got["iss"] == settings.SIMPLE_JWT["ISSUER"] == "rtcagent"
    lifetime = settings.SIMPLE_JWT["ACCESS_TOKEN_LIFETIME"].total_seconds()
    assert before + lifetime <= got["exp"] <= int(time.time()) + lifetime
    assert len(got["jti"]) == 32


def test_device_id_claim_is_absent_unless_given() -> None:
    assert "device_id" not in decode_access_token(issue_access_token(fake_user()))


def test_issue_access_token_lifetime_overrides_the_configured_one() -> None:
    got = decode_access_token(issue_access_token(fake_user(), lifetime=timedelta(hours=2)))
    assert 7200 - 5 <= got["exp"] - time.time() <= 7200


def test_decode_access_token_makes_no_database_query() -> None:
    # No django_db mark: any query would raise here.
    assert decode_access_token(issue_access_token(fake_user(7)))["sub"] == "7"


def test_expired_token_raises_token_expired() -> None:
    token = issue_access_token(fake_user(), lifetime=timedelta(minutes=-5))
    with pytest.raises(TokenExpired):
        decode_access_token(token)


def test_token_expired_within_the_leeway_is_still_accepted() -> None:
    assert settings.SIMPLE_JWT["LEEWAY"] == timedelta(seconds=30)
    token = issue_access_token(fake_user(), lifetime=timedelta(seconds=-10))
    assert decode_access_token(token)["sub"] == "42"
    late = issue_access_token(fake_user(), lifetime=timedelta(seconds=-31))
    with pytest.raises(TokenExpired):
        decode_access_token(late)


def test_forged_control_token_is_accepted() -> None:
    # The refusal cases below differ from this one in exactly one respect.
    assert decode_access_token(forge("control", "42"))["sub"] == "42"


@pytest.mark.parametrize("kind", KINDS)
def test_decode_access_token_refuses_forged_token_as_invalid(kind: str) -> None:
    with pytest.raises(TokenInvalid):
        decode_access_token(forge(kind, "42"))


@pytest.mark.parametrize("token", ["", "abc", "a.b.c", "...", "e30.e30.", "\x00\xff"])
def test_decode_access_token_refuses_garbage_as_invalid(token: str) -> None:
    with pytest.raises(TokenInvalid):
        decode_access_token(token)


def test_expired_refresh_token_is_invalid_not_expired() -> None:
    past = int(time.time()) - 3600
    token = sign_with_ring(claims("42", token_type="refresh", exp=past, iat=past - 60))
    with pytest.raises(TokenInvalid):
        decode_access_token(token)


def test_token_without_required_claim_is_invalid() -> None:
    for missing in ("exp", "iat", "sub", "iss", "jti"):
        with pytest.raises(TokenInvalid):
            decode_access_token(sign_with_ring(claims("42", **{missing: None})))


@pytest.mark.django_db
def test_token_pair_access_decodes_and_refresh_is_refused_as_access(make_user: Any) -> None:
    user = make_user()  # a pair starts a refresh-token family: a row that names the user
    pair = issue_token_pair(user)
    assert set(pair) == {"access", "refresh"}
    assert decode_access_token(pair["access"])["sub"] == str(user.pk)
    refresh = RefreshToken(pair["refresh"])
    assert refresh["sub"] == str(user.pk)
    assert refresh["fid"] == decode_access_token(pair["access"])["fid"]
    assert jwt.get_unverified_header(pair["refresh"])["kid"] == get_keyring().signing.kid
    with pytest.raises(TokenInvalid):
        decode_access_token(pair["refresh"])


def test_access_token_derived_from_refresh_keeps_device_id() -> None:
    refresh = RefreshToken.for_user(fake_user(3))
    refresh["device_id"] = "phone"
    access = decode_access_token(str(refresh.access_token))
    assert (access["sub"], access["device_id"]) == ("3", "phone")


def test_simplejwt_token_classes_verify_through_the_keyring() -> None:
    assert AccessToken(issue_access_token(fake_user(5)))["sub"] == "5"
    from rest_framework_simplejwt.exceptions import TokenError

    for kind in ("alg_none", "hs256_public_pem", "wrong_audience", "refresh_as_access"):
        with pytest.raises(TokenError):
            AccessToken(forge(kind, "5"))


def test_iat_slightly_in_the_future_is_tolerated_within_the_leeway() -> None:
    now = int(time.time())
    skewed = sign_with_ring(claims("42", iat=now + 20))
    assert decode_access_token(skewed)["sub"] == "42"
    with pytest.raises(TokenInvalid):
        decode_access_token(sign_with_ring(claims("42", iat=now + 120)))
