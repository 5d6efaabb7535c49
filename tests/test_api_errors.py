"""Hostile JSON bodies and unexpected failures on ``/api/``: always a JSON answer, never HTML.

Bodies nested 100 and 1000 levels (readable, but deeper than ``MAX_JSON_DEPTH``) and 5000
levels (past orjson's 1024) and NUL characters are refused with 400 before a view uses them, on
the token, refresh and RTC result endpoints, and nothing changes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import path

from apps.accounts.tokens import issue_access_token, issue_token_pair
from apps.gateway.models import TopicEvent
from apps.rtc.models import Rtc
from apps.sessions.models import Session
from apps.turns.models import Turn
from rtcagent import urls as project_urls

pytestmark = [pytest.mark.django_db(transaction=True)]

DEPTH_LIMIT = 64


def _with(body: dict[str, Any], field: str, depth: int) -> str:
    """``body`` as JSON with ``field`` set to lists nested ``depth`` levels (built as text: the
    standard library cannot even write 5000 levels)."""
    head = json.dumps({**body, field: None})[:-len("null}")]
    return head + "[" * depth + "]" * depth + "}"


def _deep_message(field: str) -> str:
    return f"body: JSON nested deeper than {DEPTH_LIMIT} levels at {field}{'[0]' * 63}"


def _nul_message(field: str) -> str:
    return f"body: {field} contains a NUL character (U+0000), which cannot be stored"


def _expected_detail(depth: int | None, field: str) -> str | None:
    """The refusal text, or None for the orjson parse error (checked by prefix)."""
    if depth is None:
        return _nul_message(field)
    return _deep_message(field) if depth <= 1024 else None


CASES = [pytest.param(100, id="nested-100"), pytest.param(1000, id="nested-1000"),
         pytest.param(5000, id="nested-5000"), pytest.param(None, id="nul")]


def _body(valid: dict[str, Any], field: str, depth: int | None) -> str:
    if depth is None:
        return json.dumps({**valid, field: "tab\x00-1"})
    return _with(valid, field, depth)


def _assert_refused(detail: str, depth: int | None, field: str) -> None:
    expected = _expected_detail(depth, field)
    if expected is None:
        assert detail.startswith("JSON parse error - depth limit exceeded: line 1 column "), detail
    else:
        assert detail == expected


@pytest.mark.parametrize("depth", CASES)
def test_token_refuses_hostile_bodies_with_json_400(make_user, depth: int | None) -> None:
    user = make_user("hana@example.com")
    valid = {"email": "hana@example.com", "password": "pw-hana@example.com"}
    reply = Client().post("/api/auth/token/", _body(valid, "device_id", depth),
                          content_type="application/json")
    assert reply.status_code == 400
    assert reply["Content-Type"] == "application/json"
    assert set(reply.json()) == {"detail"}
    _assert_refused(reply.json()["detail"], depth, "device_id")
    user.refresh_from_db()
    assert user.last_login is None  # no token was issued


@pytest.mark.parametrize("depth", CASES)
def test_refresh_refuses_hostile_bodies_with_json_400(make_user, depth: int | None) -> None:
    refresh = issue_token_pair(make_user())["refresh"]
    reply = Client().post("/api/auth/token/refresh/", _body({"refresh": refresh}, "extra", depth),
                          content_type="application/json")
    assert reply.status_code == 400
    assert reply["Content-Type"] == "application/json"
    assert set(reply.json()) == {"detail"}
    _assert_refused(reply.json()["detail"], depth, "extra")


def _rtc(user) -> Rtc:
    session = Session.objects.create(user=user)
    turn = Turn.objects.create(session=session, user=user, status="interrupted")
    return Rtc.objects.create(session=session, turn=turn, user=user, tool_call_id="c1",
                              tool_name="read", parameters={"path": "/a"}, status="pending")


def _post_result(user, rtc: Rtc, raw: str) -> Any:
    client = Client(headers={"authorization": f"Bearer {issue_access_token(user)}"})
    return client.post(f"/api/rtc/{rtc.id}/result", raw, content_type="application/json")


def _untouched(rtc: Rtc) -> None:
    stored = Rtc.objects.get(pk=rtc.pk)
    assert (stored.status, stored.result, stored.client_id) == ("pending", None, "")
    assert not TopicEvent.objects.filter(user_id=rtc.user_id).exists()


@pytest.mark.parametrize("depth", CASES)
def test_rtc_result_refuses_hostile_bodies_with_json_400(make_user, depth: int | None) -> None:
    user = make_user()
    rtc = _rtc(user)
    valid = {"success": True, "result": "wrote 4 bytes", "client_id": "c-1"}
    reply = _post_result(user, rtc, _body(valid, "meta", depth))
    assert reply.status_code == 400
    assert reply["Content-Type"] == "application/json"
    body = reply.json()
    # The body the widget's outbox reads: code invalid_request means "do not retry".
    assert (body["code"], body["details"]) == ("invalid_request", None)
    _assert_refused(body["message"], depth, "meta")
    _untouched(rtc)


def test_rtc_result_refuses_a_nul_in_a_field_with_json_400(make_user) -> None:
    user = make_user()
    rtc = _rtc(user)
    reply = _post_result(user, rtc, json.dumps({"success": True, "client_id": "c\x001"}))
    assert reply.status_code == 400
    assert reply.json() == {"code": "invalid_request", "message": _nul_message("client_id"),
                            "details": None}
    _untouched(rtc)


def test_rtc_result_unreadable_even_in_the_result_is_refused(make_user) -> None:
    user = make_user()
    rtc = _rtc(user)
    reply = _post_result(user, rtc, _with({"success": True}, "result", 5000))
    assert reply.status_code == 400
    assert reply.json()["message"].startswith("JSON parse error - depth limit exceeded")
    _untouched(rtc)


def test_a_tool_result_too_deep_fails_the_call_as_over_the_socket(make_user) -> None:
    """The result itself is the tool's output: like ``v1.rtc.submit_result``, the call fails
    with a reason the model reads (a 400 would make the browser drop it and the turn wait for
    the deadline)."""
    user = make_user()
    rtc = _rtc(user)
    reply = _post_result(user, rtc, _with({"success": True, "client_id": "c-1"}, "result", 1000))
    assert reply.status_code == 200
    assert reply.json()["result"]["rtc"]["status"] == "failed"
    stored = Rtc.objects.get(pk=rtc.pk)
    assert (stored.status, stored.result) == ("failed", None)
    assert "deeper than 64 levels" in stored.error_message


def test_a_nul_in_a_tool_result_is_kept_as_a_replacement_character(make_user) -> None:
    user = make_user()
    rtc = _rtc(user)
    reply = _post_result(user, rtc, json.dumps({"success": True, "result": "PK\x03\x04\x00!"}))
    assert reply.status_code == 200
    assert Rtc.objects.get(pk=rtc.pk).result == "PK\x03\x04\ufffd!"


def test_a_non_object_result_body_is_refused_with_the_field_errors(make_user) -> None:
    user = make_user()
    rtc = _rtc(user)
    reply = _post_result(user, rtc, "[1, 2]")
    assert reply.status_code == 400
    assert reply.json() == {
        "code": "invalid_request", "message": "invalid body",
        "details": {"non_field_errors": ["Invalid data. Expected a dictionary, but got list."]},
    }
    _untouched(rtc)


def test_an_unexpected_failure_answers_json_500_without_its_text(
    monkeypatch: pytest.MonkeyPatch, make_user
) -> None:
    def broken() -> None:
        raise RuntimeError("secret: the keyring path /srv/keys")

    monkeypatch.setattr("apps.accounts.views.get_keyring", broken)
    reply = Client(raise_request_exception=False).get("/.well-known/jwks.json")
    assert reply.status_code == 500
    assert reply["Content-Type"] == "application/json"
    assert reply.json() == {"detail": "A server error occurred.", "code": "server_error"}
    assert b"secret" not in reply.content and b"Traceback" not in reply.content
    # The same process keeps answering.
    monkeypatch.undo()
    assert Client().get("/.well-known/jwks.json").status_code == 200



def _crash(request):  # type: ignore[no-untyped-def]
    raise RuntimeError("secret detail that must not leak")


# This module doubles as a URLconf: the project's routes plus two views that crash.
urlpatterns = [*project_urls.urlpatterns, path("api/crash", _crash), path("crash", _crash)]
handler500 = project_urls.handler500


def test_a_crash_in_a_plain_django_view_under_api_answers_json(client, settings) -> None:
    settings.ROOT_URLCONF = __name__
    client.raise_request_exception = False
    response = client.get("/api/crash")
    assert response.status_code == 500
    assert response.json() == {"detail": "A server error occurred.", "code": "server_error"}
    assert b"secret detail" not in response.content
    page = client.get("/crash")  # elsewhere: Django's own HTML page
    assert page.status_code == 500 and page["Content-Type"].startswith("text/html")
    assert b"secret detail" not in page.content
