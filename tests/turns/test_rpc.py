"""v1.turn.list / get through the RPC registry."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from apps.turns.models import Turn
from rtcagent.errors import InvalidRequest, NotFound
from tests.sessions.factories import call, make_message, make_session, make_turn, walk

pytestmark = pytest.mark.django_db

TURN_KEYS = {
    "id", "client_id", "session_id", "status", "trigger_message_id", "error_message",
    "input_tokens", "output_tokens", "total_tokens", "cached_tokens", "reasoning_tokens",
    "created_at", "updated_at", "started_at", "completed_at", "deleted_at",
}  # fmt: skip


def finished_turns(session, n: int) -> list[str]:
    return [str(make_turn(session, status="completed").id) for _ in range(n)]


def test_turn_get_returns_the_wire_shape(make_user):
    user = make_user()
    session = make_session(user)
    message = make_message(session)
    turn = make_turn(session, trigger_message=message, client_id="t-1", error_message="")
    item = call("v1.turn.get", user, {"turn_id": str(turn.id)})["item"]
    assert set(item) == TURN_KEYS
    assert item["id"] == str(turn.id)
    assert (item["session_id"], item["trigger_message_id"]) == (str(session.id), str(message.id))
    assert (item["status"], item["client_id"], item["started_at"]) == ("pending", "t-1", None)


def test_turn_list_is_in_creation_order_with_default_limit_50(make_user):
    user = make_user()
    session = make_session(user)
    ids = finished_turns(session, 51)
    page = call("v1.turn.list", user, {"session_id": str(session.id)})
    assert [i["id"] for i in page["items"]] == ids[:50]
    rest = call(
        "v1.turn.list", user, {"session_id": str(session.id), "cursor": page["next_cursor"]}
    )
    assert ([i["id"] for i in rest["items"]], rest["next_cursor"]) == (ids[50:], "")


def test_turn_list_pages_cover_everything_once_even_with_equal_timestamps(make_user):
    user = make_user()
    session = make_session(user)
    ids = set(finished_turns(session, 7))
    finished_turns(make_session(user), 2)  # another session's turns stay out
    Turn.objects.filter(session=session).update(created_at=timezone.now())
    pages = walk("v1.turn.list", user, {"session_id": str(session.id)}, limit=3)
    flat = [i for p in pages for i in p]
    assert [len(p) for p in pages] == [3, 3, 1]
    assert len(flat) == len(set(flat)) and set(flat) == ids


@pytest.mark.parametrize(
    "params", [{"session_id": None}, {"cursor": "garbage"}, {"limit": 0}, {"limit": "x"}]
)
def test_turn_list_bad_params_are_invalid_request(make_user, params):
    user = make_user()
    session = make_session(user)
    with pytest.raises(InvalidRequest):
        call("v1.turn.list", user, {"session_id": str(session.id), **params})


@pytest.mark.parametrize("params", [{}, {"turn_id": "1"}])
def test_turn_get_bad_params_are_invalid_request(make_user, params):
    with pytest.raises(InvalidRequest):
        call("v1.turn.get", make_user(), params)


def test_turns_of_a_soft_deleted_session_are_not_found(make_user):
    user = make_user()
    session = make_session(user, deleted_at=timezone.now())
    turn = make_turn(session)
    with pytest.raises(NotFound) as err:
        call("v1.turn.get", user, {"turn_id": str(turn.id)})
    assert err.value.slug == "turn.not_found"


def test_another_users_turn_is_not_found_and_unchanged(make_user):
    owner, intruder = make_user(), make_user()
    turn = make_turn(make_session(owner), status="running")
    for tid in (turn.id, uuid.uuid4()):
        with pytest.raises(NotFound) as err:
            call("v1.turn.get", intruder, {"turn_id": str(tid)})
        assert err.value.slug == "turn.not_found"
    row = Turn.objects.get(pk=turn.pk)
    assert (row.status, row.updated_at) == ("running", turn.updated_at)
