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


__all__ = ["shutil"]
