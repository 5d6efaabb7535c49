"""v1.message.list / get through the RPC registry."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from rtcagent.errors import InvalidRequest, NotFound
from tests.sessions.factories import call, make_message, make_session, make_turn, walk

pytestmark = pytest.mark.django_db

MESSAGE_KEYS = {
    "id", "client_id", "session_id", "turn_id", "parent_message_id", "global_offset",
    "turn_offset", "role", "content", "streaming_status", "creator_kind", "creator_ref_id",
    "input_tokens", "output_tokens", "total_tokens", "cached_tokens", "reasoning_tokens",
    "created_at", "updated_at", "deleted_at",
}  # fmt: skip


def test_message_get_returns_the_wire_shape(make_user):
    user = make_user()
    session = make_session(user)
    turn = make_turn(session)
    message = make_message(session, client_id="m-1", text="hello")
    reply = make_message(
        session,
        role="assistant",
        turn=turn,
        turn_offset=2,
        content={"type": "markdown", "data": "**hi**"},
        output_tokens=7,
    )
    item = call("v1.message.get", user, {"message_id": str(message.id)})["item"]
    assert set(item) == MESSAGE_KEYS
    assert item["content"] == {"type": "text", "data": "hello"}
    assert (item["client_id"], item["global_offset"], item["role"]) == ("m-1", 1, "user")
    assert (item["creator_kind"], item["creator_ref_id"]) == ("user", str(user.pk))
    assert (item["turn_id"], item["session_id"]) == ("", str(session.id))
    item = call("v1.message.get", user, {"message_id": str(reply.id)})["item"]
    assert (item["turn_id"], item["turn_offset"], item["global_offset"]) == (str(turn.id), 2, 2)
    assert (item["creator_kind"], item["creator_ref_id"], item["output_tokens"]) == (
        "system", "system", 7,
    )  # fmt: skip


def test_message_list_is_ascending_with_default_limit_50(make_user):
    user = make_user()
    session = make_session(user)
    ids = [str(make_message(session).id) for _ in range(52)]
    page = call("v1.message.list", user, {"session_id": str(session.id)})
    assert [i["id"] for i in page["items"]] == ids[:50]
    assert page["next_cursor"] == 50
    rest = call("v1.message.list", user, {"session_id": str(session.id), "cursor": 50})
    assert [i["id"] for i in rest["items"]] == ids[50:]
    assert [i["global_offset"] for i in rest["items"]] == [51, 52]
    assert rest["next_cursor"] is None


def test_message_list_pages_cover_everything_once(make_user):
    user = make_user()
    session = make_session(user)
    ids = [str(make_message(session).id) for _ in range(10)]
    make_message(make_session(user))  # another session's message stays out
    pages = walk("v1.message.list", user, {"session_id": str(session.id)}, limit=4)
    assert pages == [ids[0:4], ids[4:8], ids[8:10]]


def test_message_list_cursor_means_after_that_offset(make_user):
    user = make_user()
    session = make_session(user)
    ids = [str(make_message(session).id) for _ in range(3)]
    for cursor, expected in [(0, ids), (1, ids[1:]), (3, []), (99, [])]:
        page = call("v1.message.list", user, {"session_id": str(session.id), "cursor": cursor})
        assert [i["id"] for i in page["items"]] == expected
        assert page["next_cursor"] is None


def test_message_list_skips_deleted_messages(make_user):
    user = make_user()
    session = make_session(user)
    kept = make_message(session)
    make_message(session, deleted_at=timezone.now())
    page = call("v1.message.list", user, {"session_id": str(session.id)})
    assert [i["id"] for i in page["items"]] == [str(kept.id)]


@pytest.mark.parametrize(
    "params",
    [
        {"session_id": None},
        {"session_id": "x"},
        {"cursor": -1},
        {"cursor": "abc"},
        {"limit": 0},
        {"limit": "many"},
    ],
)
def test_message_list_bad_params_are_invalid_request(make_user, params):
    user = make_user()
    session = make_session(user)
    with pytest.raises(InvalidRequest):
        call("v1.message.list", user, {"session_id": str(session.id), **params})


def test_messages_of_a_soft_deleted_session_are_not_found(make_user):
    user = make_user()
    session = make_session(user)
    message = make_message(session)
    session.deleted_at = timezone.now()
    session.save()
    with pytest.raises(NotFound) as err:
        call("v1.message.get", user, {"message_id": str(message.id)})
    assert err.value.slug == "message.not_found"
    with pytest.raises(NotFound) as err:
        call("v1.message.list", user, {"session_id": str(session.id)})
    assert err.value.slug == "session.not_found"


def test_another_users_message_is_not_found(make_user):
    owner, intruder = make_user(), make_user()
    message = make_message(make_session(owner), text="secret")
    for mid in (message.id, uuid.uuid4()):
        with pytest.raises(NotFound) as err:
            call("v1.message.get", intruder, {"message_id": str(mid)})
        assert err.value.slug == "message.not_found"
        assert "secret" not in str(err.value)
    message.refresh_from_db()
    assert message.content == {"type": "text", "data": "secret"}


def test_message_send_takes_agent_prompt_only_when_it_creates_the_session(make_user):
    from apps.sessions.models import Session

    user = make_user()

    def send(**params):
        return call("v1.message.send", user, {
            "content_data": {"type": "text", "data": "hi"}, "client_id": str(uuid.uuid4()),
            **params})

    sid = send(agent_prompt="Be brief.")["result"]["session_id"]
    later = send(server_session_id=sid, agent_prompt="Be verbose.")
    assert later["result"]["session_id"] == sid
    assert later["updates"][0]["data_list"][0]["agent_prompt"] == "Be brief."
    assert Session.objects.get(pk=sid).agent_prompt == "Be brief."
