"""v1.session.fork through the RPC registry."""

from __future__ import annotations

import uuid

import pytest

from apps.gateway.models import TopicEvent
from apps.sessions.models import Message, Session
from rtcagent.errors import ClientIdConflict, InvalidRequest, NotFound
from tests.sessions.factories import call, make_message, make_session, make_turn

pytestmark = pytest.mark.django_db

CONTENT = {"type": "user_message", "data": {"text": "try again"}}


@pytest.fixture
def history(make_user):
    """A session with messages A (user), B, C (assistant), D (user)."""
    user = make_user()
    session = make_session(user, title="Work", work_mode="plan", agent_prompt="be brief")
    turn = make_turn(session, status="completed")
    a = make_message(session, text="A", client_id="a")
    b = make_message(session, role="assistant", text="B", turn=turn, turn_offset=1)
    c = make_message(session, role="tool", text="C", turn=turn, turn_offset=2, parent_message=b)
    d = make_message(session, text="D", client_id="d")
    return user, session, [a, b, c, d]


def fork_params(session, anchor, **extra):
    return {
        "old_server_session_id": str(session.id),
        "old_server_message_id": str(anchor.id),
        "new_client_session_id": "new-cs",
        "new_client_message_id": "new-m",
        "content_data": CONTENT,
        **extra,
    }


def test_fork_copies_history_before_the_message_and_adds_the_new_one(history):
    user, session, (a, b, c, d) = history
    reply = call("v1.session.fork", user, fork_params(session, d), device_id="dev-2")
    result = reply["result"]
    new = Session.objects.get(pk=result["session_id"])
    assert result["turn_id"] == ""
    assert (new.user_id, new.client_session_id, new.device_id) == (user.pk, "new-cs", "dev-2")
    assert (new.title, new.work_mode, new.agent_prompt, new.status) == (
        "Work", "plan", "be brief", "idle",
    )  # fmt: skip
    copied = list(Message.objects.filter(session=new).order_by("global_offset"))
    assert result["message_ids"] == [str(m.id) for m in copied]
    assert [m.global_offset for m in copied] == [1, 2, 3, 4]
    assert [m.content["data"] for m in copied[:3]] == ["A", "B", "C"]
    assert [m.role for m in copied] == ["user", "assistant", "tool", "user"]
    assert [m.client_id for m in copied] == ["", "", "", "new-m"]
    assert copied[3].content == CONTENT
    assert all(m.turn_id is None for m in copied)
    assert copied[2].parent_message_id == copied[1].id  # links point at the copies
    assert new.last_message_offset == 4
    # the old session is untouched
    assert list(Message.objects.filter(session=session).values_list("id", flat=True)) == [
        a.id, b.id, c.id, d.id,
    ]  # fmt: skip


def test_fork_publishes_one_update_with_session_and_messages(history):
    user, session, (*_, d) = history
    reply = call("v1.session.fork", user, fork_params(session, d))
    (update,) = reply["updates"]
    assert set(update) == {"id", "items", "data_list", "offset"}
    sid, mids = reply["result"]["session_id"], reply["result"]["message_ids"]
    assert update["items"] == [{"entity": "session", "action": "created", "entity_id": sid}] + [
        {"entity": "message", "action": "created", "entity_id": m} for m in mids
    ]
    assert [x["id"] for x in update["data_list"]] == [sid, *mids]
    assert update["data_list"][-1]["content"] == CONTENT
    assert TopicEvent.objects.get(user=user, offset=update["offset"]).data == update


def test_fork_limit_keeps_the_most_recent_messages(history):
    user, session, (*_, d) = history
    reply = call("v1.session.fork", user, fork_params(session, d, limit=2))
    copied = Message.objects.filter(session_id=reply["result"]["session_id"]).order_by(
        "global_offset"
    )
    assert [m.content["data"] for m in copied][:2] == ["B", "C"]
    assert [m.global_offset for m in copied] == [1, 2, 3]
    assert copied[1].parent_message_id == copied[0].id


def test_fork_at_the_first_message_copies_nothing(history):
    user, session, (a, *_) = history
    reply = call("v1.session.fork", user, fork_params(session, a))
    assert len(reply["result"]["message_ids"]) == 1
    (only,) = Message.objects.filter(session_id=reply["result"]["session_id"])
    assert (only.global_offset, only.client_id) == (1, "new-m")


def test_fork_limit_is_capped_at_1000(history, monkeypatch):
    from apps.sessions import services

    seen = {}
    real = services.messages_before

    def spy(**kwargs):
        seen.update(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(services, "messages_before", spy)
    user, session, (*_, d) = history
    call("v1.session.fork", user, fork_params(session, d, limit=5000))
    assert seen["limit"] == 1000


def test_fork_with_a_used_client_message_id_is_a_conflict_and_creates_nothing(history):
    user, session, (a, *_, d) = history
    sessions_before = Session.objects.count()
    with pytest.raises(ClientIdConflict) as err:
        call("v1.session.fork", user, fork_params(session, d, new_client_message_id="a"))
    assert err.value.details == {"session_id": str(session.id), "message_id": str(a.id)}
    assert Session.objects.count() == sessions_before
    assert Message.objects.count() == 4
    assert not TopicEvent.objects.filter(user=user).exists()


@pytest.mark.parametrize(
    "change",
    [{"content_data": {"type": "user_message", "data": {}}},
     {"content_data": {"type": "toolcall_input", "data": {}}},
     {"content_data": {"type": "text", "data": 5}},
     {"content_data": "text"},
     {"content_data": {"type": "text", "data": "x", "extra": 1}},
     {"limit": 0}, {"limit": "all"}, {"new_client_message_id": ""},
     {"new_client_session_id": ""}, {"old_server_message_id": "nope"}],
)  # fmt: skip
def test_fork_bad_params_create_nothing(history, change):
    user, session, (*_, d) = history
    with pytest.raises(InvalidRequest):
        call("v1.session.fork", user, fork_params(session, d, **change))
    assert Session.objects.count() == 1
    assert Message.objects.count() == 4


def test_fork_of_a_message_of_another_session_is_not_found(history):
    user, _, (*_, d) = history
    other = make_session(user)
    with pytest.raises(NotFound) as err:
        call("v1.session.fork", user, fork_params(other, d))
    assert err.value.slug == "message.not_found"
    assert Session.objects.count() == 2


def test_fork_of_another_users_session_is_not_found(history, make_user):
    _, session, (*_, d) = history
    intruder = make_user()
    with pytest.raises(NotFound) as err:
        call("v1.session.fork", intruder, fork_params(session, d))
    assert err.value.slug == "session.not_found"
    # the intruder's own session does not unlock the owner's message either
    mine = make_session(intruder)
    with pytest.raises(NotFound) as err:
        call("v1.session.fork", intruder, fork_params(mine, d))
    assert err.value.slug == "message.not_found"
    assert Session.objects.filter(user=intruder).count() == 1
    assert Message.objects.filter(user=intruder).count() == 0
    with pytest.raises(NotFound):
        call(
            "v1.session.fork",
            intruder,
            fork_params(session, d, old_server_message_id=str(uuid.uuid4())),
        )
