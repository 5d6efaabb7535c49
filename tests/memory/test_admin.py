"""Memory in the operator console: listed, searched, edited (with the API's limits) and
exported as JSON."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from apps.memory.models import UserMemory
from apps.memory.selectors import user_memory_search

pytestmark = pytest.mark.django_db

LIST = "/admin/memory/usermemory/"


@pytest.fixture
def staff(make_user) -> Client:
    client = Client()
    client.force_login(make_user(is_staff=True, is_superuser=True))
    return client


def test_user_memories_are_listed_filtered_and_searched(staff, make_user, remember) -> None:
    owner = make_user("ana@example.com")
    m = remember(owner, "Prefers tabs over spaces", category="feedback", importance="high")
    other = remember(make_user(), "Something else", importance="low")
    page = staff.get(f"{LIST}?q=tabs").content.decode()
    assert f"{LIST}{m.pk}/change/" in page and f"{LIST}{other.pk}/change/" not in page
    page = staff.get(f"{LIST}?q=ana@example.com").content.decode()
    assert f"{LIST}{m.pk}/change/" in page
    page = staff.get(f"{LIST}?importance__exact=low").content.decode()
    assert f"{LIST}{other.pk}/change/" in page and f"{LIST}{m.pk}/change/" not in page


def _form(m: UserMemory, **changes: str) -> dict:
    return {"user": m.user_id, "category": m.category, "importance": m.importance,
            "content": m.content, "session": "", **changes}


def test_an_operator_edits_a_memory_and_search_follows(staff, make_user, remember) -> None:
    user = make_user()
    m = remember(user, "Uses Jenkins")
    reply = staff.post(f"{LIST}{m.pk}/change/", _form(m, content="Uses GitHub Actions",
                                                       importance="critical"))
    assert reply.status_code == 302
    m.refresh_from_db()
    assert (m.content, m.importance) == ("Uses GitHub Actions", "critical")
    assert [f.memory.pk for f in user_memory_search(user_id=user.id, query="github")] == [m.pk]


@pytest.mark.parametrize(("changes", "error"), [
    ({"content": "   "}, "This field is required"),
    ({"content": "x" * 4001}, "4001 characters, at most 4000 are allowed"),
    ({"importance": "urgent"}, "Select a valid choice"),
])
def test_the_admin_keeps_the_limits(staff, make_user, remember, changes, error) -> None:
    m = remember(make_user(), "Unchanged")
    reply = staff.post(f"{LIST}{m.pk}/change/", _form(m, **changes))
    assert reply.status_code == 200 and error in reply.content.decode()
    m.refresh_from_db()
    assert (m.content, m.importance) == ("Unchanged", "medium")


def test_an_operator_adds_a_memory(staff, make_user) -> None:
    user = make_user()
    reply = staff.post(f"{LIST}add/", {"user": user.id, "category": "user",
                                       "importance": "medium", "content": "Added by ops"})
    assert reply.status_code == 302
    assert UserMemory.objects.get().source == "operator"


def test_the_selection_exports_as_json(staff, make_user, remember, make_session, note) -> None:
    owner = make_user("bo@example.com")
    a = remember(owner, "One", age=10)
    b = remember(owner, "Two")
    remember(owner, "Not selected")
    reply = staff.post(LIST, {"action": "export_json", "_selected_action": [a.pk, b.pk]})
    assert reply.status_code == 200
    assert reply["Content-Disposition"].startswith('attachment; filename="user-memories-')
    items = json.loads(reply.content)["items"]
    assert [(i["id"], i["content"], i["user"]) for i in items] == [
        (a.pk, "One", "bo@example.com"), (b.pk, "Two", "bo@example.com")]
    session = make_session(owner)
    n = note(session, "A decision")
    reply = staff.post("/admin/memory/sessionmemory/",
                       {"action": "export_json", "_selected_action": [n.pk]})
    (item,) = json.loads(reply.content)["items"]
    assert (item["id"], item["session_id"], item["content"]) == (n.pk, str(session.id),
                                                                 "A decision")


def test_session_memory_pages_open_and_are_read_only(staff, make_user, make_session,
                                                     note) -> None:
    session = make_session(make_user())
    n = note(session, "Chose Redis streams")
    page = staff.get("/admin/memory/sessionmemory/?q=redis")
    assert f"/admin/memory/sessionmemory/{n.pk}/change/" in page.content.decode()
    view = staff.get(f"/admin/memory/sessionmemory/{n.pk}/change/")
    assert view.status_code == 200
    assert staff.get("/admin/memory/sessionmemory/add/").status_code == 403
    assert staff.get("/admin/memory/extractionstate/").status_code == 200
