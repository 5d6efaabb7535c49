"""The operator console (Django admin) and the OpenAPI document, as a staff user sees them."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.rtc.models import Rtc
from apps.sessions.models import Message, Session
from apps.turns.models import Turn

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def staff(make_user) -> Client:
    admin = make_user("ops@example.com", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(admin)
    return client


def _world(make_user) -> dict:
    user = make_user("someone@example.com")
    session = Session.objects.create(user=user, title="Quarterly report", status="active")
    message = Message.objects.create(session=session, user=user, global_offset=1, role="user",
                                     content={"type": "text", "data": "hi"}, client_id="m-1")
    turn = Turn.objects.create(session=session, user=user, status="interrupted",
                               trigger_message=message)
    rtc = Rtc.objects.create(session=session, turn=turn, user=user, tool_call_id="call-9",
                             tool_name="write", parameters={"path": "/a"}, status="pending")
    return {"session": session, "message": message, "turn": turn, "rtc": rtc}


@pytest.mark.parametrize(("path", "query", "entity"), [
    ("agent_sessions/session", "?q=Quarterly", "session"),
    ("agent_sessions/session", "?status__exact=active", "session"),
    ("agent_sessions/message", "?q=m-1", "message"),
    ("turns/turn", "?status__exact=interrupted", "turn"),
    ("rtc/rtc", "?tool_name=write", "rtc"),
    ("rtc/rtc", "?q=call-9", "rtc"),
])
def test_admin_lists_filter_and_search(staff, make_user, path, query, entity) -> None:
    world = _world(make_user)
    page = staff.get(f"/admin/{path}/{query}")
    assert page.status_code == 200
    assert f"/{world[entity].pk}/change/" in page.content.decode()


@pytest.mark.parametrize(("path", "query", "entity"), [
    ("rtc/rtc", "?status__exact=completed", "rtc"),
    ("agent_sessions/session", "?q=nothing-like-it", "session"),
    ("turns/turn", "?status__exact=running", "turn"),
])
def test_admin_filters_exclude_what_does_not_match(staff, make_user, path, query, entity) -> None:
    world = _world(make_user)
    page = staff.get(f"/admin/{path}/{query}")
    assert f"/{world[entity].pk}/change/" not in page.content.decode()


def test_admin_change_pages_open(staff, make_user) -> None:
    world = _world(make_user)
    for path, obj in (("agent_sessions/session", world["session"]), ("turns/turn", world["turn"]),
                      ("rtc/rtc", world["rtc"]), ("agent_sessions/message", world["message"])):
        assert staff.get(f"/admin/{path}/{obj.pk}/change/").status_code == 200


def test_admin_is_for_staff_only(make_user) -> None:
    client = Client()
    client.force_login(make_user())
    assert client.get("/admin/rtc/rtc/").status_code == 302


def test_openapi_document_describes_the_http_api() -> None:
    reply = Client().get("/api/schema/", HTTP_ACCEPT="application/json")
    assert reply.status_code == 200
    doc = reply.json() if reply["content-type"].startswith("application/json") else None
    text = reply.content.decode()
    assert "/api/rtc/{rtc_id}/result" in text and "/api/auth/token/" in text
    assert doc is None or doc["openapi"].startswith("3.")
