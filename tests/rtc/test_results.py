"""The browser's side of an RTC: status reports, results over RPC and over HTTP."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

from apps.accounts.tokens import decode_access_token, issue_access_token
from apps.gateway.models import TopicEvent
from apps.gateway.registry import RpcContext, get_handler
from apps.rtc.models import Rtc
from apps.sessions.models import Session
from apps.turns.models import Turn
from apps.turns.queue import pending
from rtcagent.errors import InvalidRequest, InvalidState, NotFound, PermissionDenied

pytestmark = [pytest.mark.django_db(transaction=True)]


def _rtc(user, *, status: str = "pending", device_id: str = "") -> Rtc:
    session = Session.objects.create(user=user, device_id=device_id)
    turn = Turn.objects.create(session=session, user=user, status="interrupted")
    return Rtc.objects.create(session=session, turn=turn, user=user, tool_call_id="c1",
                              tool_name="read", parameters={"path": "/a"}, status=status)


def _call(method: str, user, params: dict, device_id: str = "") -> dict:
    return get_handler(method)(RpcContext(user_id=user.id, device_id=device_id), params)


def test_repeating_the_current_status_is_a_no_op(make_user) -> None:
    user = make_user()
    rtc = _rtc(user)
    first = _call("v1.rtc.update_status", user, {"rtc_id": str(rtc.id), "status": "executing"})
    again = _call("v1.rtc.update_status", user, {"rtc_id": str(rtc.id), "status": "executing"})
    assert len(first["updates"]) == 1 and again["updates"] == []
    with pytest.raises(InvalidState):
        _call("v1.rtc.update_status", user, {"rtc_id": str(rtc.id), "status": "sent"})
    assert Rtc.objects.get(pk=rtc.id).status == "executing"


def test_executing_is_a_claim_only_its_claimant_may_repeat(make_user) -> None:
    """Two tabs of one device both claim a call: the second is refused, so it never runs the
    tool; the first tab's retry (same client_id, its reply lost) still succeeds."""
    user = make_user()
    rtc = _rtc(user, device_id="laptop")
    claim = {"rtc_id": str(rtc.id), "status": "executing", "client_id": "tab-1"}
    assert len(_call("v1.rtc.update_status", user, claim, device_id="laptop")["updates"]) == 1
    with pytest.raises(InvalidState) as refused:
        _call("v1.rtc.update_status", user, {**claim, "client_id": "tab-2"}, device_id="laptop")
    assert refused.value.details == {"status": "executing", "to": "executing"}
    assert _call("v1.rtc.update_status", user, claim, device_id="laptop")["updates"] == []
    _call("v1.rtc.submit_result", user, {"rtc_id": str(rtc.id), "success": True, "result": "x",
                                         "client_id": "r-1"}, device_id="laptop")
    assert Rtc.objects.get(pk=rtc.id).status == "completed"


def test_a_result_resumes_the_turn_once(make_user) -> None:
    user = make_user()
    rtc = _rtc(user)
    _call("v1.rtc.submit_result", user, {"rtc_id": str(rtc.id), "success": True,
                                         "result": "x", "client_id": "a"})
    _call("v1.rtc.submit_result", user, {"rtc_id": str(rtc.id), "success": True,
                                         "result": "y", "client_id": "a"})
    assert pending(str(rtc.session_id))["resume"] == 1
    assert Rtc.objects.get(pk=rtc.id).result == "x"


def test_only_the_sessions_device_may_report(make_user) -> None:
    user = make_user()
    rtc = _rtc(user, device_id="laptop")
    with pytest.raises(PermissionDenied):
        _call("v1.rtc.submit_result", user, {"rtc_id": str(rtc.id), "success": True,
                                             "result": "x"}, device_id="phone")
    assert Rtc.objects.get(pk=rtc.id).status == "pending"
    done = _call("v1.rtc.submit_result", user, {"rtc_id": str(rtc.id), "success": True,
                                                "result": "x"}, device_id="laptop")
    assert done["result"]["rtc"]["status"] == "completed"


def test_rtcs_of_a_deleted_session_are_gone(make_user) -> None:
    user = make_user()
    rtc = _rtc(user)
    Session.objects.filter(pk=rtc.session_id).update(deleted_at="2026-01-01T00:00:00Z")
    with pytest.raises(NotFound):
        _call("v1.rtc.submit_result", user, {"rtc_id": str(rtc.id), "success": True})


def test_the_results_read_gives_the_rows_as_the_orm_reads_them(make_user) -> None:
    """``_owned`` is one hand-written statement (``rtcagent.rows``): the RTC, its session and
    its call message come back with the same values (JSON, UUIDs, times) as the ORM's own
    read, and only to their owner."""
    from django.forms.models import model_to_dict

    from apps.rtc.services import _owned
    from apps.sessions.models import Message

    user = make_user()
    rtc = _rtc(user, device_id="laptop")
    call = Message.objects.create(
        session_id=rtc.session_id, user=user, client_id=f"turn:{rtc.turn_id}:0:call:c1",
        global_offset=1, turn_id=rtc.turn_id, turn_offset=1, role="assistant",
        content={"type": "toolcall_input", "data": {"id": "c1", "tool_name": "read",
                                                    "input": '{"path": "/a"}'}})
    Rtc.objects.filter(pk=rtc.id).update(message=call, result={"lines": ["é", 1]},
                                          deadline="2026-12-05T10:00:00Z")
    read = _owned(user.id, str(rtc.id))
    orm = Rtc.objects.select_related("session", "message").get(pk=rtc.id)
    assert model_to_dict(read) == model_to_dict(orm)
    assert (read.created_at, read.deadline, read.session_id) == (
        orm.created_at, orm.deadline, orm.session_id)
    assert (read.session.device_id, read.session.root_session_id) == ("laptop", None)
    assert (read.message.id, read.message.client_id, read.message.turn_offset,
            read.message.content) == (call.id, call.client_id, 1, call.content)
    with pytest.raises(NotFound):
        _owned(make_user().id, str(rtc.id))


def test_reserved_client_ids_are_refused(make_user) -> None:
    user = make_user()
    with pytest.raises(InvalidRequest):
        _call("v1.message.send", user, {"client_id": "turn:x:0:markdown",
                                        "content_data": {"type": "text", "data": "hi"}})
    assert not Session.objects.filter(user=user).exists()


def _http(user, token: str | None = None) -> Client:
    return Client(headers={"authorization": f"Bearer {token or issue_access_token(user)}"})


def test_http_twin_applies_once_and_checks_ownership(make_user) -> None:
    user, other = make_user(), make_user()
    rtc = _rtc(user)
    url = f"/api/rtc/{rtc.id}/result"
    body = {"success": True, "result": {"lines": 3}, "client_id": "c-9"}
    first = _http(user).post(url, body, content_type="application/json")
    assert first.status_code == 200
    assert first.json()["result"]["rtc"]["result"] == {"lines": 3}
    assert first.json()["result"]["duplicate"] is False
    again = _http(user).post(url, body, content_type="application/json")
    assert again.json()["result"]["duplicate"] is True and again.json()["updates"] == []
    events = TopicEvent.objects.filter(user=user).count()
    stolen = _http(other).post(url, {"success": True, "result": "no"},
                               content_type="application/json")
    assert stolen.status_code == 404 and stolen.json()["code"] == "rtc.not_found"
    assert Rtc.objects.get(pk=rtc.id).result == {"lines": 3}
    assert TopicEvent.objects.filter(user=user).count() == events
    assert not TopicEvent.objects.filter(user=other).exists()


def test_http_twin_refuses_bad_bodies_and_missing_auth(make_user) -> None:
    user = make_user()
    rtc = _rtc(user)
    url = f"/api/rtc/{rtc.id}/result"
    bad = _http(user).post(url, {"result": "no success flag"}, content_type="application/json")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_request"
    anonymous = Client().post(url, {"success": True}, content_type="application/json")
    assert anonymous.status_code == 401
    missing = _http(user).post(f"/api/rtc/{uuid.uuid4()}/result", {"success": True},
                               content_type="application/json")
    assert missing.status_code == 404
    assert Rtc.objects.get(pk=rtc.id).status == "pending"


def test_login_binds_the_device_id_into_the_tokens(make_user) -> None:
    user = make_user("dev@example.com")
    reply = Client().post("/api/auth/token/", {"email": "dev@example.com",
                                               "password": "pw-dev@example.com",
                                               "device_id": "tab-42"},
                          content_type="application/json")
    assert reply.status_code == 200
    assert decode_access_token(reply.json()["access"])["device_id"] == "tab-42"
    refreshed = Client().post("/api/auth/token/refresh/", {"refresh": reply.json()["refresh"]},
                              content_type="application/json")
    assert decode_access_token(refreshed.json()["access"])["device_id"] == "tab-42"
    assert user.id
