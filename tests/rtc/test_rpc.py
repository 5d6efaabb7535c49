"""v1.rtc.list / get through the RPC registry."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from apps.rtc.models import Rtc
from rtcagent.errors import InvalidRequest, NotFound
from tests.sessions.factories import call, make_rtc, make_session, make_turn, walk

pytestmark = pytest.mark.django_db

RTC_KEYS = {
    "id", "client_id", "session_id", "turn_id", "message_id", "output_message_id", "offset",
    "tool_call_id", "tool_name", "parameters", "status", "needs_approval", "result",
    "error_message", "deadline", "created_at", "updated_at", "sent_at", "started_at",
    "completed_at", "deleted_at",
}  # fmt: skip


@pytest.fixture
def owner_turn(make_user):
    user = make_user()
    return user, make_turn(make_session(user), status="interrupted")


def test_rtc_get_returns_the_wire_shape(owner_turn):
    user, turn = owner_turn
    rtc = make_rtc(
        turn,
        tool_name="write",
        tool_call_id="call_9",
        parameters={"path": "/x", "content": "y"},
        needs_approval=True,
        result={"ok": True},
        status="completed",
        offset=3,
    )
    item = call("v1.rtc.get", user, {"rtc_id": str(rtc.id)})["item"]
    assert set(item) == RTC_KEYS
    assert (item["id"], item["turn_id"], item["session_id"]) == (
        str(rtc.id), str(turn.id), str(turn.session_id),
    )  # fmt: skip
    assert (item["tool_name"], item["tool_call_id"], item["offset"]) == ("write", "call_9", 3)
    assert item["parameters"] == {"path": "/x", "content": "y"}
    assert (item["status"], item["needs_approval"], item["result"]) == (
        "completed", True, {"ok": True},
    )  # fmt: skip
    assert (item["message_id"], item["deadline"]) == ("", None)


def test_rtc_list_is_in_creation_order_with_default_limit_50(owner_turn):
    user, turn = owner_turn
    ids = [str(make_rtc(turn).id) for _ in range(51)]
    page = call("v1.rtc.list", user, {"session_id": str(turn.session_id)})
    assert [i["id"] for i in page["items"]] == ids[:50]
    rest = call(
        "v1.rtc.list", user, {"session_id": str(turn.session_id), "cursor": page["next_cursor"]}
    )
    assert ([i["id"] for i in rest["items"]], rest["next_cursor"]) == (ids[50:], "")


def test_rtc_list_pages_cover_everything_once_even_with_equal_timestamps(owner_turn):
    user, turn = owner_turn
    ids = {str(make_rtc(turn).id) for _ in range(8)}
    Rtc.objects.filter(turn=turn).update(created_at=timezone.now())
    pages = walk("v1.rtc.list", user, {"session_id": str(turn.session_id)}, limit=3)
    flat = [i for p in pages for i in p]
    assert [len(p) for p in pages] == [3, 3, 2]
    assert len(flat) == len(set(flat)) and set(flat) == ids


@pytest.mark.parametrize(
    "params", [{"session_id": "no"}, {"cursor": "garbage"}, {"limit": -5}, {"limit": True}]
)
def test_rtc_list_bad_params_are_invalid_request(owner_turn, params):
    user, turn = owner_turn
    with pytest.raises(InvalidRequest):
        call("v1.rtc.list", user, {"session_id": str(turn.session_id), **params})


def test_another_users_rtc_is_not_found_and_unchanged(owner_turn, make_user):
    _, turn = owner_turn
    rtc = make_rtc(turn, status="sent")
    intruder = make_user()
    for rid in (rtc.id, uuid.uuid4()):
        with pytest.raises(NotFound) as err:
            call("v1.rtc.get", intruder, {"rtc_id": str(rid)})
        assert err.value.slug == "rtc.not_found"
    row = Rtc.objects.get(pk=rtc.pk)
    assert (row.status, row.updated_at) == ("sent", rtc.updated_at)
    with pytest.raises(NotFound):
        call("v1.rtc.list", intruder, {"session_id": str(turn.session_id)})


def test_rtcs_of_a_soft_deleted_session_are_not_found(owner_turn):
    user, turn = owner_turn
    rtc = make_rtc(turn)
    turn.session.deleted_at = timezone.now()
    turn.session.save()
    with pytest.raises(NotFound):
        call("v1.rtc.get", user, {"rtc_id": str(rtc.id)})
