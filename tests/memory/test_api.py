"""The owner-only memory API: list and search, edit, delete, export, a session's notes.

Another user's memory or session answers 404 exactly as a missing one; bad input answers 400
``{code, message, details}`` and changes nothing."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from apps.memory.models import UserMemory

pytestmark = pytest.mark.django_db


def _items(reply) -> list[int]:
    assert reply.status_code == 200, reply.content
    return [item["id"] for item in reply.json()["items"]]


def test_the_api_needs_a_token() -> None:
    for path in ("/api/memories", "/api/memories/export", "/api/memories/1"):
        assert Client().get(path).status_code == 401


def test_list_is_the_callers_memories_newest_change_first(make_user, remember, api) -> None:
    user, other = make_user(), make_user()
    a = remember(user, "First", age=30)
    b = remember(user, "Second", category="feedback", importance="high", age=20)
    remember(other, "Not yours")
    reply = api(user).get("/api/memories")
    assert reply.json() == {"items": [
        {"id": b.pk, "category": "feedback", "importance": "high", "content": "Second",
         "session_id": None, "created_at": b.created_at.isoformat(),
         "updated_at": b.updated_at.isoformat()},
        {"id": a.pk, "category": "project", "importance": "medium", "content": "First",
         "session_id": None, "created_at": a.created_at.isoformat(),
         "updated_at": a.updated_at.isoformat()},
    ], "next_cursor": ""}
    assert _items(api(user).get("/api/memories?category=feedback")) == [b.pk]
    assert _items(api(user).get("/api/memories?importance=medium")) == [a.pk]


def test_pages_follow_the_cursor_without_repeats(make_user, remember, api) -> None:
    user = make_user()
    made = [remember(user, f"memory {i}", age=100 - i).pk for i in range(7)]
    client, seen, cursor = api(user), [], ""
    while True:
        reply = client.get("/api/memories", {"limit": 3, **({"cursor": cursor} if cursor else {})})
        seen += _items(reply)
        cursor = reply.json()["next_cursor"]
        if not cursor:
            break
    assert seen == made[::-1]


def test_search_ranks_as_the_agent_does_and_pages_too(make_user, remember, api) -> None:
    user = make_user()
    low = remember(user, "deploy staging checklist", importance="low")  # 2 x 0.7
    crit = remember(user, "never deploy fridays", importance="critical")  # 1 x 1.5
    med = remember(user, "staging deploy is blue/green")  # 2 x 1.0
    remember(user, "unrelated")
    client = api(user)
    assert _items(client.get("/api/memories?q=deploy+staging")) == [med.pk, crit.pk, low.pk]
    first = client.get("/api/memories", {"q": "deploy staging", "limit": 2})
    assert _items(first) == [med.pk, crit.pk]
    rest = client.get("/api/memories", {"q": "deploy staging", "limit": 2,
                                         "cursor": first.json()["next_cursor"]})
    assert _items(rest) == [low.pk] and rest.json()["next_cursor"] == ""


@pytest.mark.parametrize("query", [
    "limit=0", "limit=201", "limit=ten", "category=hobby", "importance=urgent",
    "cursor=not-a-cursor", "cursor=eyJvIjotMX0", "q=x&cursor=eyJ1IjoiMjAyMCJ9", "q=" + "x" * 501,
])
def test_bad_list_parameters_are_a_clear_400(make_user, api, query) -> None:
    reply = api(make_user()).get(f"/api/memories?{query}")
    assert reply.status_code == 400
    body = reply.json()
    assert body["code"] == "invalid_request" and body["message"]


def test_patch_changes_only_the_given_fields(make_user, remember, api) -> None:
    user = make_user()
    m = remember(user, "Uses npm", category="user", age=60)
    reply = api(user).patch(f"/api/memories/{m.pk}", {"content": " Uses pnpm ",
                                                       "importance": "high"},
                            content_type="application/json")
    assert reply.status_code == 200
    body = reply.json()
    assert (body["id"], body["content"], body["importance"], body["category"]) == (
        m.pk, "Uses pnpm", "high", "user")
    assert body["updated_at"] > m.updated_at.isoformat()
    assert _items(api(user).get("/api/memories?q=pnpm")) == [m.pk]  # the index followed


@pytest.mark.parametrize(("body", "field"), [
    ({"content": ""}, "content"),
    ({"content": "x" * 4001}, "content"),
    ({"content": "a\u0000b"}, "content"),
    ({"importance": "urgent"}, "importance"),
    ({"category": "hobby"}, "category"),
    ({"owner": 3}, "owner"),
    ({}, "non_field_errors"),
    ([1, 2], "non_field_errors"),
])
def test_a_bad_patch_is_a_400_and_changes_nothing(make_user, remember, api, body,
                                                  field) -> None:
    user = make_user()
    m = remember(user, "Unchanged", category="user")
    reply = api(user).patch(f"/api/memories/{m.pk}", json.dumps(body),
                            content_type="application/json")
    assert reply.status_code == 400, reply.content
    data = reply.json()
    assert data["code"] == "invalid_request"
    assert field in json.dumps(data)
    assert UserMemory.objects.get(pk=m.pk).content == "Unchanged"


def test_a_malformed_body_is_a_400(make_user, remember, api) -> None:
    user = make_user()
    m = remember(user, "Unchanged")
    reply = api(user).patch(f"/api/memories/{m.pk}", "{not json",
                            content_type="application/json")
    assert reply.status_code == 400


@pytest.mark.parametrize("path", ["{theirs}", "999999999", "abc", "-1", "0",
                                  "99999999999999999999999"])
def test_someone_elses_or_no_memory_is_a_404(make_user, remember, api, path) -> None:
    user = make_user()
    theirs = remember(make_user(), "Their memory")
    url = f"/api/memories/{path.format(theirs=theirs.pk)}"
    for reply in (api(user).patch(url, {"content": "mine"}, content_type="application/json"),
                  api(user).delete(url)):
        assert reply.status_code == 404
        assert reply.json()["code"] == "memory.not_found"
    assert UserMemory.objects.get(pk=theirs.pk).content == "Their memory"


def test_delete_removes_the_memory_once(make_user, remember, api) -> None:
    user = make_user()
    m = remember(user, "Forget me")
    assert api(user).delete(f"/api/memories/{m.pk}").status_code == 204
    assert not UserMemory.objects.filter(pk=m.pk).exists()
    assert api(user).delete(f"/api/memories/{m.pk}").status_code == 404
    assert _items(api(user).get("/api/memories?q=forget")) == []


def test_export_is_every_memory_of_the_caller_as_a_json_file(make_user, make_session,
                                                             remember, note, api) -> None:
    user, other = make_user(), make_user()
    session = make_session(user)
    a = remember(user, "One", age=20, session=session)
    b = remember(user, "Two", importance="critical")
    n = note(session, "A decision")
    remember(other, "Not yours")
    note(make_session(other), "Not yours either")
    reply = api(user).get("/api/memories/export")
    assert reply.status_code == 200
    assert reply["Content-Type"] == "application/json"
    assert reply["Content-Disposition"].startswith('attachment; filename="memories-')
    assert reply["Cache-Control"] == "no-store"
    data = json.loads(reply.content)
    assert data["version"] == 1 and data["exported_at"]
    assert [m["id"] for m in data["memories"]] == [a.pk, b.pk]
    assert data["memories"][0]["session_id"] == str(session.id)
    assert data["session_memories"] == [{
        "id": n.pk, "category": "decision", "content": "A decision",
        "created_at": n.created_at.isoformat(), "session_id": str(session.id)}]


def test_a_sessions_notes_are_for_its_owner(make_user, make_session, note, api) -> None:
    user, other = make_user(), make_user()
    session = make_session(user)
    first = note(session, "Chose SQLite")
    second = note(session, "Tests pass", category="progress")
    reply = api(user).get(f"/api/sessions/{session.id}/memories")
    assert reply.json() == {"items": [
        {"id": first.pk, "category": "decision", "content": "Chose SQLite",
         "created_at": first.created_at.isoformat()},
        {"id": second.pk, "category": "progress", "content": "Tests pass",
         "created_at": second.created_at.isoformat()},
    ]}
    assert api(other).get(f"/api/sessions/{session.id}/memories").status_code == 404
    assert api(user).get("/api/sessions/not-a-uuid/memories").status_code == 404
    empty = make_session(user)
    assert api(user).get(f"/api/sessions/{empty.id}/memories").json() == {"items": []}


def test_list_filters_by_the_session_they_were_saved_in(make_user, make_session,
                                                        remember, api) -> None:
    user = make_user()
    here, elsewhere = make_session(user), make_session(user)
    a = remember(user, "Deploy with blue green", session=here, age=10)
    remember(user, "Deploy on Fridays never", session=elsewhere)
    remember(user, "Deploy notes without a session")
    assert _items(api(user).get(f"/api/memories?session_id={here.id}")) == [a.pk]
    assert _items(api(user).get(f"/api/memories?session_id={here.id}&q=deploy")) == [a.pk]
    other = make_user()
    assert _items(api(other).get(f"/api/memories?session_id={here.id}")) == []
    assert api(user).get("/api/memories?session_id=nope").status_code == 400
