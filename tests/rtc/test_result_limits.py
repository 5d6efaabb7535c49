"""Tool results the server cannot keep as they are: NUL is escaped, too deep or too large fails
the call once with a message the model sees (the browser is answered, so it never retries)."""

from __future__ import annotations

import pytest

from apps.rtc.models import Rtc
from apps.turns.queue import pending
from tests.sessions.factories import call, make_rtc, make_session, make_turn

pytestmark = [pytest.mark.django_db(transaction=True)]


def _waiting_rtc(user) -> Rtc:
    return make_rtc(make_turn(make_session(user), status="interrupted"), status="executing")


def _submit(user, rtc: Rtc, result, client_id: str = "r1") -> dict:
    return call("v1.rtc.submit_result", user, {"rtc_id": str(rtc.id), "success": True,
                                               "result": result, "client_id": client_id})


def test_nul_in_a_result_is_kept_as_a_replacement_character(make_user) -> None:
    user = make_user()
    rtc = _waiting_rtc(user)
    reply = _submit(user, rtc, {"content": "PK\x03\x04\x00\x00binary"})
    stored = Rtc.objects.get(pk=rtc.pk)
    assert stored.status == "completed"
    assert stored.result == {"content": "PK\x03\x04\ufffd\ufffdbinary"}
    assert reply["result"]["rtc"]["status"] == "completed"
    assert pending(str(rtc.session_id))["resume"] == 1


def test_a_result_nested_too_deep_fails_the_call_with_a_reason(make_user) -> None:
    user = make_user()
    rtc = _waiting_rtc(user)
    deep: object = 1
    for _ in range(200):
        deep = [deep]
    reply = _submit(user, rtc, deep)
    stored = Rtc.objects.get(pk=rtc.pk)
    assert stored.status == "failed" and stored.result is None
    assert stored.error_message.startswith("the tool's result was refused: result:")
    assert "deeper than 64 levels" in stored.error_message
    assert reply["result"]["rtc"]["status"] == "failed"
    assert pending(str(rtc.session_id))["resume"] == 1  # the model hears about it
    again = _submit(user, rtc, deep)  # a retry is answered from what is stored
    assert again["result"]["duplicate"] is True


def test_a_result_over_the_size_limit_fails_the_call_with_a_reason(make_user, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_RESULT_BYTES": 1000}
    user = make_user()
    rtc = _waiting_rtc(user)
    _submit(user, rtc, "x" * 2000)
    stored = Rtc.objects.get(pk=rtc.pk)
    assert stored.status == "failed" and stored.result is None
    assert "2002 bytes, over the limit of 1000 bytes" in stored.error_message
    small = _waiting_rtc(user)
    _submit(user, small, "x" * 900)
    assert Rtc.objects.get(pk=small.pk).status == "completed"
