"""Tokens signed with the project's own key whose ``sub`` is not a user id.

Such a token can only come from a bug or a leaked key, but it must still be refused like any
invalid token (401 ``token_not_valid``), never reach the ORM as a lookup it cannot take (a 500),
and never name a user by a non-canonical spelling of its id.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from apps.gateway.auth import TokenRejected, authenticate
from apps.rtc.models import Rtc
from apps.sessions.models import Session
from apps.turns.models import Turn
from tests.accounts.forge import claims, sign_with_ring

pytestmark = pytest.mark.django_db

INVALID = {
    "detail": "Given token not valid for any token type",
    "code": "token_not_valid",
    "messages": [
        {"token_class": "AccessToken", "token_type": "access", "message": "Token is invalid"}
    ],
}

HOSTILE_SUBJECTS = [
    pytest.param("abc", id="non-numeric"),
    pytest.param("", id="empty"),
    pytest.param("-1", id="negative"),
    pytest.param("0", id="zero"),
    pytest.param("1.0", id="decimal"),
    pytest.param("1e3", id="exponent"),
    pytest.param(" {uid}", id="padded"),
    pytest.param("0{uid}", id="leading-zero"),
    pytest.param("{uid}_0", id="underscore"),
    pytest.param("\uff11", id="fullwidth-digit"),
    pytest.param("9223372036854775808", id="past-bigint"),
    pytest.param("9" * 40, id="huge"),
    pytest.param("{uid}\x00", id="nul"),
    pytest.param(["{uid}"], id="list"),
    pytest.param({"id": "{uid}"}, id="object"),
    pytest.param(7, id="number"),
    pytest.param(None, id="null"),
]


def _subject(template: Any, user_id: int) -> Any:
    if isinstance(template, str):
        return template.replace("{uid}", str(user_id))
    if isinstance(template, list):
        return [_subject(t, user_id) for t in template]
    if isinstance(template, dict):
        return {k: _subject(v, user_id) for k, v in template.items()}
    return template


def _token(template: Any, user_id: int) -> str:
    # claims() drops a None value; put the null back explicitly.
    payload = claims("placeholder")
    payload["sub"] = _subject(template, user_id)
    return sign_with_ring(payload)


def _bearer(token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize("sub", HOSTILE_SUBJECTS)
def test_me_answers_401_json_for_a_subject_that_is_not_a_user_id(make_user, sub: Any) -> None:
    user = make_user()
    reply = _bearer(_token(sub, user.pk)).get("/api/auth/me/")
    assert reply.status_code == 401
    assert reply["Content-Type"] == "application/json"
    assert reply.json() == INVALID


@pytest.mark.parametrize("sub", HOSTILE_SUBJECTS)
def test_rtc_result_answers_401_json_and_changes_nothing(make_user, sub: Any) -> None:
    user = make_user()
    session = Session.objects.create(user=user)
    turn = Turn.objects.create(session=session, user=user, status="interrupted")
    rtc = Rtc.objects.create(session=session, turn=turn, user=user, tool_call_id="c1",
                             tool_name="read", parameters={}, status="pending")
    reply = _bearer(_token(sub, user.pk)).post(
        f"/api/rtc/{rtc.id}/result", {"success": True, "result": "x"},
        content_type="application/json",
    )
    assert reply.status_code == 401
    assert reply.json() == INVALID
    assert Rtc.objects.get(pk=rtc.pk).status == "pending"


@pytest.mark.parametrize("sub", HOSTILE_SUBJECTS)
def test_refresh_answers_401_json(make_user, sub: Any) -> None:
    user = make_user()
    payload = claims("placeholder", token_type="refresh")
    payload["sub"] = _subject(sub, user.pk)
    reply = Client().post("/api/auth/token/refresh/", {"refresh": sign_with_ring(payload)},
                          content_type="application/json")
    assert reply.status_code == 401
    assert reply.json()["code"] == "token_not_valid"
    assert "access" not in reply.json()


@pytest.mark.parametrize("sub", HOSTILE_SUBJECTS)
def test_the_gateway_rejects_it_as_invalid_not_expired(make_user, sub: Any) -> None:
    user = make_user()
    with pytest.raises(TokenRejected) as refused:
        authenticate(_token(sub, user.pk))
    assert refused.value.expired is False


def test_the_canonical_subject_still_authenticates(make_user) -> None:
    user = make_user()
    token = _token("{uid}", user.pk)
    assert _bearer(token).get("/api/auth/me/").json() == {"id": user.pk, "email": user.email}
    assert authenticate(token).user_id == user.pk
