"""Compacting a session from the widget: the summary appears and the next turn starts from it."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login, send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_compact_button_summarizes_the_session(page: Any, web: Any, worker: Any, model: Any,
                                               web_user: Any) -> None:
    model.add_rule({"last_user_contains": "Use these sections"},
                   {"content": "**Summary**: the user said hello."})
    model.add_rule({"last_role": "user"}, {"content": "hello back"})
    login(page, web_user)
    send(page, "hello")
    expect(page.locator("rtc-message-list .md").last).to_have_text("hello back", timeout=20000)
    page.locator("rtc-session-list li[aria-current=true] [data-act=compact]").click()
    summary = page.locator("rtc-message-list details.summary")
    expect(summary).to_have_count(1, timeout=20000)
    summary.locator("summary").click()
    expect(summary.locator(".md strong")).to_have_text("Summary")
    send(page, "and now?")
    # the kept tail still ends with "hello back": wait for the third request (answer, summary,
    # this turn), not for the text
    model.wait_for_requests(3, timeout=20)
    expect(page.locator("rtc-message-list .md").last).to_have_text("hello back", timeout=20000)
    last = model.requests[2].body["messages"]
    assert last[1]["content"].endswith("**Summary**: the user said hello.")
    assert [m["content"] for m in last if m["role"] == "user"] == ["and now?"]
