"""The widget floating over the Django admin for staff (token from the staff-only endpoint)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import keep_artifacts, send, wait_connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"


def _admin_login(page: Any, user: Any) -> None:
    page.goto("/admin/login/")
    page.fill("input[name=username]", user.email)
    page.fill("input[name=password]", f"pw-{user.email}")
    page.click("input[type=submit]")
    expect(page.locator("rtc-agent")).to_have_count(1, timeout=15000)


def test_staff_get_the_widget_over_the_admin(page: Any, web: Any, worker: Any, model: Any,
                                             web_user: Any, django_db_blocker: Any) -> None:
    with django_db_blocker.unblock():
        type(web_user).objects.filter(pk=web_user.pk).update(is_staff=True, is_superuser=True)
    model.add_rule({"last_user_contains": "report"}, {"content": "Here is a **summary** ...",
                                                     "tool_calls": [{"name": "write", "arguments": {
                                                         "path": "/reports/today.md",
                                                         "content": "# Today\n- 3 new users\n"}}]})
    model.add_rule({"last_role": "tool"}, {"content": (
        "I wrote `/reports/today.md`:\n\n| metric | value |\n|---|---|\n| new users | 3 |\n")})
    _admin_login(page, web_user)
    page.click("rtc-agent .bubble")
    wait_connected(page)
    send(page, "write today's report")
    expect(page.locator("rtc-message-list .md").last).to_contain_text("new users", timeout=20000)
    # the token is bound to this browser's device: the session records it
    device = page.evaluate("localStorage.getItem('rtc-agent:device')")
    sessions = page.evaluate("Object.values(document.querySelector('rtc-agent').agent.store"
                             ".state.sessions).map((s) => s.device_id)")
    assert sessions == [device]
    page.click("rtc-agent header [data-act=files]")
    page.click("rtc-file-panel li[data-path='/reports/today.md']")
    keep_artifacts(page, "admin")
    if os.environ.get("RTC_UPDATE_SCREENSHOTS"):
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOCS_IMG / "admin.png"))


def test_staff_token_endpoint_refuses_others(page: Any, web: Any, web_user: Any) -> None:
    res = page.request.post("/api/widget/staff-token")
    assert res.status in (302, 403)
    page.goto("/admin/login/")
    page.fill("input[name=username]", web_user.email)
    page.fill("input[name=password]", f"pw-{web_user.email}")
    page.click("input[type=submit]")  # not staff: the admin refuses, and so does the endpoint
    assert page.locator("rtc-agent").count() == 0


# --- the operator console at 1280 x 800 -------------------------------------------------------

CONSOLE_PAGES = (
    "/admin/",
    "/admin/agent_sessions/session/",
    "/admin/agent_sessions/message/",
    "/admin/turns/turn/",
    "/admin/rtc/rtc/",
    "/admin/accounts/user/",
    "/admin/system/",
    "/admin/usage/",
)


def _console_world(web_user: Any, django_db_blocker: Any) -> Any:
    """A superuser, the product theme (a transactional test's flush removed the migration's
    row) and rows with long values in every list."""
    import importlib

    from django.apps import apps

    from tests.sessions.factories import make_message, make_rtc, make_session, make_turn

    with django_db_blocker.unblock():
        type(web_user).objects.filter(pk=web_user.pk).update(is_staff=True, is_superuser=True)
        importlib.import_module("apps.ops.migrations.0002_rtcagent_theme").install(apps, None)
        session = make_session(web_user, title="A rather long session title about quarterly "
                                                "revenue reports and their many footnotes")
        asked = make_message(session, text="please write the quarterly report " * 20)
        turn = make_turn(session, status="failed", input_tokens=1200, output_tokens=300,
                         trigger_message=asked,
                         error_message="context: The conversation is too long for the model")
        make_rtc(turn, tool_name="writeFileWithAVeryLongToolName", status="failed")
        return session


@pytest.mark.parametrize("path", CONSOLE_PAGES)
def test_console_pages_fit_1280_pixels(page: Any, web: Any, web_user: Any,
                                       django_db_blocker: Any, path: str) -> None:
    _console_world(web_user, django_db_blocker)
    _admin_login(page, web_user)
    assert page.viewport_size == {"width": 1280, "height": 800}
    page.goto(path)
    expect(page.locator("#content")).to_be_visible()
    keep_artifacts(page, "console" + path.replace("/", "-").rstrip("-"))
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    table = page.locator("#result_list")
    if table.count():
        box = table.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1280, box
    header = page.evaluate("getComputedStyle(document.querySelector('#header')).backgroundColor")
    assert header == "rgb(20, 33, 61)"  # the theme's navy
    assert page.locator("#site-name").inner_text().strip() == "rtcagent console"
    assert page.errors == []


def test_failed_turn_and_system_page_in_the_browser(page: Any, web: Any, web_user: Any,
                                                    django_db_blocker: Any) -> None:
    session = _console_world(web_user, django_db_blocker)
    _admin_login(page, web_user)
    page.goto(f"/admin/agent_sessions/session/{session.pk}/change/")
    page.click("text=turns (the latest 50)")
    page.locator("#turns-group a.inlineviewlink, #turns-group a.inlinechangelink").first.click()
    expect(page.locator(".field-error_category .readonly")).to_have_text("context")
    expect(page.locator(".field-request .readonly")).to_contain_text("quarterly report")
    page.goto("/admin/")
    page.click("#ops-console >> text=System")
    expect(page.locator("#ops-checks tr[data-check=database] td.ok")).to_have_text("reachable")
    expect(page.locator("#ops-errors tr[data-category=context] td").nth(1)).to_have_text("1")
    keep_artifacts(page, "console-system")
    if os.environ.get("RTC_UPDATE_SCREENSHOTS"):
        page.screenshot(path=str(DOCS_IMG / "console-system.png"), full_page=True)


__all__ = ["shutil"]
