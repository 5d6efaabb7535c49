"""The operator console in the Django admin: theme, names, inlines, failures, actions, and who
may see what. Real PostgreSQL and Redis; no server process (tests/ops/test_live.py has those)."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import Permission
from django.test import Client

from apps.gateway import stream
from apps.rtc.models import Rtc
from apps.sessions.models import Message, Session
from apps.turns import state
from apps.turns.models import Turn
from tests.sessions.factories import make_message, make_rtc, make_session, make_turn

pytestmark = pytest.mark.django_db

theme_migration = importlib.import_module("apps.ops.migrations.0002_rtcagent_theme")


@pytest.fixture
def boss(make_user: Any) -> Any:
    return make_user("boss@example.com", is_staff=True, is_superuser=True)


@pytest.fixture
def staff(boss: Any) -> Client:
    client = Client()
    client.force_login(boss)
    return client


@pytest.fixture
def clerk(make_user: Any) -> Client:
    """Staff, not superuser, allowed to view sessions and even to change themes."""
    user = make_user("clerk@example.com", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        codename__in=["view_session", "view_turn", "change_theme", "view_theme"]))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def customer(make_user: Any) -> Client:
    client = Client()
    client.force_login(make_user("customer@example.com"))
    return client


def _post_action(client: Client, path: str, action: str, pks: list[Any]) -> Any:
    return client.post(f"/admin/{path}/", {"action": action,
                                           "_selected_action": [str(pk) for pk in pks]},
                       follow=True)


# --- theme and names -----------------------------------------------------------------------

def test_the_migration_installs_the_product_theme_as_the_only_active_one() -> None:
    theme = django_apps.get_model("admin_interface", "Theme")
    # Deleting the last theme makes admin_interface's signal create its stock one, active; one
    # row first, as a transactional test's flush may have left none (xdist orders tests freely).
    theme.objects.create(name="leftover")
    theme.objects.all().delete()
    assert list(theme.objects.values_list("name", "active")) == [("Django", True)]
    theme_migration.install(django_apps, None)
    theme_migration.install(django_apps, None)  # idempotent
    assert list(theme.objects.filter(active=True).values_list("name", flat=True)) == ["rtcagent"]
    ours = theme.objects.get(name="rtcagent")
    assert (ours.title, ours.css_header_background_color, ours.logo) == (
        "rtcagent console", "#14213D", "")
    assert theme.objects.count() == 2


def test_index_shows_the_theme_readable_names_and_the_console_links(staff: Client) -> None:
    theme_migration.install(django_apps, None)
    page = staff.get("/admin/").content.decode()
    assert "Site administration | rtcagent console\n</title>" in page
    assert "rtcagent-theme" in page  # body class of the active theme
    assert "data:image/svg+xml" in page and "%23FCA311" in page  # the inline logo
    sections = re.findall(r'class="section" title="[^"]*">([^<]*)</a>', page)
    assert sections == ["Accounts", "Admin Interface", "Attachments",
                        "Authentication and Authorization", "Goals, loops and todos", "Live calls",
                        "Memory",
                        "Object storage", "Operations", "Remote tool calls", "Sessions", "Turns"]
    assert 'href="/admin/system/"' in page and 'href="/admin/usage/"' in page
    assert "/admin/admin_interface/theme/" in page  # a superuser sees the theme


def test_the_theme_is_hidden_from_staff_who_are_not_superusers(clerk: Client) -> None:
    page = clerk.get("/admin/").content.decode()
    assert "/admin/agent_sessions/session/" in page
    assert "/admin/admin_interface/theme/" not in page
    assert clerk.get("/admin/admin_interface/theme/").status_code == 403
    assert clerk.get("/admin/admin_interface/").status_code == 404


def test_list_pages_are_trimmed(staff: Client, make_user: Any) -> None:
    session = make_session(make_user())
    make_turn(session, status="completed")
    for path, columns in (("agent_sessions/session", 6), ("turns/turn", 7), ("rtc/rtc", 6)):
        cl = staff.get(f"/admin/{path}/").context["cl"]
        assert len(cl.list_display) - 1 == columns, path  # minus the action checkbox


# --- session page: inlines -----------------------------------------------------------------

def test_a_long_session_shows_its_latest_rows_inline_and_links_to_all(
    staff: Client, make_user: Any, django_assert_max_num_queries: Any
) -> None:
    session = make_session(make_user(), title="Long one")
    for i in range(60):
        make_message(session, text=f"message number {i}")
    turn = make_turn(session, status="interrupted")
    make_rtc(turn, status="sent")
    with django_assert_max_num_queries(40):
        response = staff.get(f"/admin/agent_sessions/session/{session.pk}/change/")
    page = response.content.decode()
    formsets = {fs.opts.model.__name__: fs for fs in response.context["inline_admin_formsets"]}
    offsets = [form.instance.global_offset for form in formsets["Message"].formset.forms]
    assert offsets == list(range(11, 61))
    assert [f.instance.pk for f in formsets["Turn"].formset.forms] == [turn.pk]
    assert len(formsets["Rtc"].formset.forms) == 1
    assert "message number 59" in page and "message number 9<" not in page
    assert f'href="/admin/agent_sessions/message/?session={session.pk}">60 messages' in page
    listed = staff.get(f"/admin/agent_sessions/message/?session={session.pk}")
    assert listed.context["cl"].result_count == 60


# --- failed turn ----------------------------------------------------------------------------

def test_a_failed_turn_shows_category_message_and_the_request(staff: Client,
                                                               make_user: Any) -> None:
    session = make_session(make_user())
    asked = make_message(session, role="user",
                         content={"type": "user_message", "data": {"text": "summarise Q3"}})
    turn = make_turn(session, status="failed", trigger_message=asked,
                     error_message="context: Conversation too long")
    make_message(session, role="system", turn=turn, client_id=f"turn:{turn.pk}:error",
                 content={"type": "error", "data": {
                     "category": "context", "title": "Conversation too long",
                     "message": "Compact the session, then send again.", "retryable": False}})
    page = staff.get(f"/admin/turns/turn/{turn.pk}/change/").content.decode()
    for text in ("context", "Conversation too long", "Compact the session, then send again.",
                 "not retryable", "summarise Q3",
                 f'href="/admin/agent_sessions/message/{asked.pk}/change/"'):
        assert text in page, text
    listed = staff.get("/admin/turns/turn/?status__exact=failed").content.decode()
    assert '<td class="field-error">context</td>' in listed


def test_a_completed_turn_has_no_failure_section(staff: Client, make_user: Any) -> None:
    turn = make_turn(make_session(make_user()), status="completed")
    page = staff.get(f"/admin/turns/turn/{turn.pk}/change/").content.decode()
    assert "request it failed on" not in page


# --- actions --------------------------------------------------------------------------------

def test_stop_action_cancels_a_turn_waiting_on_the_browser(staff: Client,
                                                            make_user: Any) -> None:
    session = make_session(make_user(), status="active")
    waiting = make_turn(session, status="interrupted")
    rtc = make_rtc(waiting, status="sent")
    done = make_turn(make_session(session.user), status="completed")
    page = _post_action(staff, "turns/turn", "stop_turns", [waiting.pk, done.pk])
    assert "Asked 1 turn(s) to stop; 1 had ended or could not be stopped." in page.content.decode()
    waiting.refresh_from_db()
    rtc.refresh_from_db()
    assert (waiting.status, rtc.status) == ("cancelled", "failed")
    assert Turn.objects.get(pk=done.pk).status == "completed"
    assert Session.objects.get(pk=session.pk).status == "idle"


def test_stop_action_flags_a_running_turn_for_its_worker(staff: Client, make_user: Any) -> None:
    running = make_turn(make_session(make_user(), status="active"), status="running")
    _post_action(staff, "turns/turn", "stop_turns", [running.pk])
    assert state.stop_requested(str(running.pk)) is True
    running.refresh_from_db()
    assert running.status == "running" and running.stop_requested_at is not None


def test_session_actions_stop_the_open_turn_and_close(staff: Client, make_user: Any) -> None:
    user = make_user()
    session = make_session(user, status="active")
    turn = make_turn(session, status="pending")
    before = stream.position(user.pk).offset
    page = _post_action(staff, "agent_sessions/session", "stop_open_turn", [session.pk])
    assert "Asked 1 open turn(s) to stop" in page.content.decode()
    assert Turn.objects.get(pk=turn.pk).status == "cancelled"
    page = _post_action(staff, "agent_sessions/session", "close_sessions", [session.pk])
    assert "Closed 1 session(s)." in page.content.decode()
    session.refresh_from_db()
    assert session.status == "closed" and session.closed_at is not None
    assert stream.position(user.pk).offset == before + 2  # turn.updated, session.updated
    page = _post_action(staff, "agent_sessions/session", "close_sessions", [session.pk])
    assert "Closed 0 session(s)." in page.content.decode()  # idempotent, nothing published
    assert stream.position(user.pk).offset == before + 2


def test_revoke_tokens_action_of_the_user_admin(staff: Client, make_user: Any) -> None:
    user = make_user()
    _post_action(staff, "accounts/user", "revoke_tokens", [user.pk])
    user.refresh_from_db()
    assert user.tokens_valid_after is not None


# --- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/admin/turns/turn/", "/admin/agent_sessions/session/"])
def test_console_pages_refuse_anonymous_and_non_staff(client: Client, customer: Client,
                                                      path: str) -> None:
    for who in (client, customer):
        response = who.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


def test_actions_refused_to_non_staff_change_nothing(customer: Client, clerk: Client,
                                                     make_user: Any) -> None:
    session = make_session(make_user(), status="active")
    turn = make_turn(session, status="interrupted")
    customer.post("/admin/turns/turn/", {"action": "stop_turns", "_selected_action": [turn.pk]})
    customer.post("/admin/agent_sessions/session/",
                  {"action": "close_sessions", "_selected_action": [session.pk]})
    # staff who may only view: the changelist answers, but actions of others' models are absent
    clerk.post("/admin/agent_sessions/session/",
               {"action": "close_sessions", "_selected_action": [session.pk]})
    assert Turn.objects.get(pk=turn.pk).status == "interrupted"
    assert Session.objects.get(pk=session.pk).status == "active"
    assert not state.stop_requested(str(turn.pk))
    assert Message.objects.count() == 0 and Rtc.objects.count() == 0
