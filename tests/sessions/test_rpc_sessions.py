"""v1.session.list / get / open / close / update through the RPC registry."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from apps.gateway.models import TopicEvent
from apps.sessions.models import Session
from rtcagent.errors import InvalidRequest, NotFound
from tests.sessions.factories import call, make_session, walk

pytestmark = pytest.mark.django_db

SESSION_KEYS = {
    "id", "client_id", "owner_kind", "owner_ref_id", "device_id", "title", "status",
    "work_mode", "todo_list", "agent_prompt", "root_client_session_id",
    "root_server_session_id", "parent_client_session_id", "parent_server_session_id",
    "sub_agent_parent_message_id", "closed_at", "deleted_at", "total_input_tokens",
    "total_output_tokens", "total_tokens", "current_context_tokens", "total_cached_read_tokens",
    "total_cached_write_tokens", "total_reasoning_tokens", "total_cost_usd",
    "last_token_update_at", "compression_threshold", "compression_progress",
    "rounds_until_compression", "estimated_next_round_tokens", "created_at", "updated_at",
}  # fmt: skip


def assert_update(update: dict, user, items: list[tuple[str, str, str]]) -> None:
    """An Update: its items, one entity per item in data_list, and its durable topic row."""
    assert set(update) == {"id", "items", "data_list", "offset"}
    uuid.UUID(update["id"])
    assert [(i["entity"], i["action"], i["entity_id"]) for i in update["items"]] == items
    assert [d["id"] for d in update["data_list"]] == [i[2] for i in items]
    row = TopicEvent.objects.get(user=user, offset=update["offset"])
    assert row.data == update


def test_session_get_returns_the_wire_shape(make_user):
    user = make_user()
    session = make_session(user, title="Plan", device_id="dev-1", client_session_id="c-9")
    item = call("v1.session.get", user, {"session_id": str(session.id)})["item"]
    assert set(item) == SESSION_KEYS
    assert item["id"] == str(session.id)
    assert (item["client_id"], item["title"], item["device_id"]) == ("c-9", "Plan", "dev-1")
    assert (item["status"], item["work_mode"], item["owner_kind"]) == ("idle", "edit", "user")
    assert item["owner_ref_id"] == str(user.pk)
    assert item["parent_server_session_id"] == "" and item["closed_at"] is None
    created = datetime.fromisoformat(item["created_at"])
    assert item["created_at"].endswith("Z") and created == session.created_at


def test_session_list_is_newest_update_first_with_default_limit_20(make_user):
    user = make_user()
    sessions = [make_session(user) for _ in range(22)]
    page = call("v1.session.list", user)
    assert [i["id"] for i in page["items"]] == [str(s.id) for s in reversed(sessions)][:20]
    assert page["next_cursor"] != ""
    rest = call("v1.session.list", user, {"cursor": page["next_cursor"]})
    assert [i["id"] for i in rest["items"]] == [str(sessions[1].id), str(sessions[0].id)]
    assert rest["next_cursor"] == ""


def test_session_list_pages_cover_everything_once_even_with_equal_timestamps(make_user):
    user = make_user()
    ids = {str(make_session(user).id) for _ in range(7)}
    Session.objects.filter(user=user).update(updated_at=timezone.now())  # force ties
    pages = walk("v1.session.list", user, {}, limit=3)
    assert [len(p) for p in pages] == [3, 3, 1]
    flat = [i for p in pages for i in p]
    assert len(flat) == len(set(flat)) and set(flat) == ids


def test_session_list_skips_soft_deleted_and_foreign_sessions(make_user):
    user, other = make_user(), make_user()
    kept = make_session(user)
    make_session(user, deleted_at=timezone.now())
    make_session(other)
    page = call("v1.session.list", user, {"limit": 50})
    assert [i["id"] for i in page["items"]] == [str(kept.id)]


def test_session_list_caps_limit_at_page_max(make_user, settings):
    settings.RTCAGENT = {**settings.RTCAGENT, "PAGE_MAX": 2}
    user = make_user()
    for _ in range(3):
        make_session(user)
    assert len(call("v1.session.list", user, {"limit": 1000})["items"]) == 2


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": -1}, {"limit": "x"}, {"limit": 1.5}, {"cursor": "%%%"},
     {"cursor": "bm90LWpzb24"}, {"cursor": 5}],
)  # fmt: skip
def test_session_list_bad_params_are_invalid_request(make_user, params):
    with pytest.raises(InvalidRequest):
        call("v1.session.list", make_user(), params)


def test_session_get_of_soft_deleted_or_missing_session_is_not_found(make_user):
    user = make_user()
    gone = make_session(user, deleted_at=timezone.now())
    for sid in (gone.id, uuid.uuid4()):
        with pytest.raises(NotFound) as err:
            call("v1.session.get", user, {"session_id": str(sid)})
        assert err.value.slug == "session.not_found"


@pytest.mark.parametrize("params", [{}, {"session_id": "nope"}, {"session_id": None}, []])
def test_session_get_bad_params_are_invalid_request(make_user, params):
    with pytest.raises(InvalidRequest):
        call("v1.session.get", make_user(), params)


def test_session_close_then_open(make_user):
    user = make_user()
    session = make_session(user, status="active")
    closed = call("v1.session.close", user, {"session_id": str(session.id), "client_id": "k"})
    assert closed["result"] == {"success": True}
    (update,) = closed["updates"]
    assert_update(update, user, [("session", "updated", str(session.id))])
    assert update["data_list"][0]["status"] == "closed"
    assert update["data_list"][0]["closed_at"] is not None
    row = Session.objects.get(pk=session.pk)
    assert row.status == "closed" and row.closed_at is not None

    opened = call("v1.session.open", user, {"session_id": str(session.id)})
    assert opened["result"] == {"success": True}
    (update,) = opened["updates"]
    assert_update(update, user, [("session", "updated", str(session.id))])
    assert (update["data_list"][0]["status"], update["data_list"][0]["closed_at"]) == ("idle", None)
    row = Session.objects.get(pk=session.pk)
    assert (row.status, row.closed_at) == ("idle", None)


@pytest.mark.parametrize("status", ["active", "idle"])
def test_session_open_of_an_open_session_is_an_idempotent_success(make_user, status):
    user = make_user()
    session = make_session(user, status=status)
    reply = call("v1.session.open", user, {"session_id": str(session.id)})
    assert reply == {"result": {"success": True}, "updates": []}
    row = Session.objects.get(pk=session.pk)
    assert (row.status, row.updated_at) == (status, session.updated_at)


def test_session_close_of_a_closed_session_is_an_idempotent_success(make_user):
    user = make_user()
    session = make_session(user)
    call("v1.session.close", user, {"session_id": str(session.id)})
    before = Session.objects.get(pk=session.pk)
    reply = call("v1.session.close", user, {"session_id": str(session.id)})
    assert reply == {"result": {"success": True}, "updates": []}
    after = Session.objects.get(pk=session.pk)
    assert (after.closed_at, after.updated_at) == (before.closed_at, before.updated_at)


def test_session_update_title_and_work_mode(make_user):
    user = make_user()
    session = make_session(user, title="old")
    reply = call(
        "v1.session.update",
        user,
        {"session_id": str(session.id), "title": "new", "work_mode": "plan"},
    )
    assert reply["result"] == {"session_id": str(session.id)}
    (update,) = reply["updates"]
    assert_update(update, user, [("session", "updated", str(session.id))])
    assert (update["data_list"][0]["title"], update["data_list"][0]["work_mode"]) == ("new", "plan")
    row = Session.objects.get(pk=session.pk)
    assert (row.title, row.work_mode) == ("new", "plan")
    assert row.updated_at > session.updated_at


def test_session_update_soft_delete_hides_the_session(make_user):
    user = make_user()
    session = make_session(user)
    when = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    reply = call(
        "v1.session.update", user, {"session_id": str(session.id), "deleted_at": when.isoformat()}
    )
    assert reply["updates"][0]["data_list"][0]["deleted_at"] == "2026-11-30T12:00:00Z"
    assert Session.objects.get(pk=session.pk).deleted_at == when
    assert call("v1.session.list", user)["items"] == []
    for method in ("v1.session.get", "v1.session.update"):
        with pytest.raises(NotFound):
            call(method, user, {"session_id": str(session.id), "title": "x"})
    assert Session.objects.get(pk=session.pk).title == session.title


@pytest.mark.parametrize(
    "change",
    [{}, {"title": "x" * 256}, {"work_mode": "turbo"}, {"deleted_at": "yesterday"},
     {"title": None, "work_mode": None, "deleted_at": None}],
)  # fmt: skip
def test_session_update_bad_params_change_nothing(make_user, change):
    user = make_user()
    session = make_session(user, title="keep")
    with pytest.raises(InvalidRequest):
        call("v1.session.update", user, {"session_id": str(session.id), **change})
    row = Session.objects.get(pk=session.pk)
    assert (row.title, row.work_mode, row.deleted_at) == ("keep", "edit", None)
    assert row.updated_at == session.updated_at
    assert not TopicEvent.objects.filter(user=user).exists()


@pytest.mark.parametrize(
    ("method", "extra"),
    [("v1.session.get", {}), ("v1.session.open", {}), ("v1.session.close", {}),
     ("v1.session.update", {"title": "stolen"}),
     ("v1.session.update", {"deleted_at": "2026-01-01T00:00:00Z"}),
     ("v1.message.list", {}), ("v1.turn.list", {}), ("v1.rtc.list", {})],
)  # fmt: skip
def test_another_users_session_is_not_found_and_unchanged(make_user, method, extra):
    owner, intruder = make_user(), make_user()
    session = make_session(owner, title="mine", status="closed")
    with pytest.raises(NotFound) as err:
        call(method, intruder, {"session_id": str(session.id), **extra})
    assert err.value.slug == "session.not_found"
    row = Session.objects.get(pk=session.pk)
    assert (row.title, row.status, row.deleted_at, row.updated_at) == (
        "mine", "closed", None, session.updated_at,
    )  # fmt: skip
    assert not TopicEvent.objects.exists()
