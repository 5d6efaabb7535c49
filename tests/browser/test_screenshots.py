"""The main states of the widget on the demo page, checked and photographed for the docs.

The screenshots are written to docs/img/ only with RTC_UPDATE_SCREENSHOTS=1 (otherwise to
var/browser-tests/ for a look after a run):

    RTC_UPDATE_SCREENSHOTS=1 REDIS_URL=... pytest tests/browser/test_screenshots.py
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import artifacts_dir, login, send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

ANSWER = """To count the words of a file, read it and split on whitespace:

```python
from pathlib import Path

def count_words(path: str) -> int:
    return len(Path(path).read_text().split())
```

* `split()` with no argument also drops empty strings;
* for **huge** files, iterate over the lines instead.
"""

OLD_PLAN = "# Trip plan\n- book the train\n- pack\n"
NEW_PLAN = "# Trip plan\n- book the train to Lyon\n- pack\n- reserve a table\n"

QUESTIONS = [{"question": "Which day do you want to leave?", "header": "Departure", "options": [
    {"label": "Friday evening", "description": "after work, arrives late"},
    {"label": "Saturday morning", "description": "cheaper, a shorter weekend"}]},
    {"question": "How many travellers?", "header": "Travellers",
     "options": [{"label": "1"}, {"label": "2"}]}]


def _shot(page: Any, name: str) -> None:
    out = ROOT / "docs" / "img" if os.environ.get("RTC_UPDATE_SCREENSHOTS") else artifacts_dir()
    out.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(200)  # let the last render settle
    page.screenshot(path=str(out / name))


def _rtcs(page: Any) -> list[dict[str, Any]]:
    return page.evaluate(
        "Object.values(document.querySelector('rtc-agent').agent.store.state.rtcs)")


def test_main_states_of_the_widget(page: Any, web: Any, worker: Any, model: Any,
                                  web_user: Any) -> None:
    model.add_rule({"last_user_contains": "count the words"},
                   {"reasoning": "A short Python function answers this.", "content": ANSWER,
                    "chunk_size": 12, "chunk_delay": 0.01})
    model.add_rule({"last_user_contains": "update my trip plan"},
                   {"content": "I'll update `/plan.md`.", "tool_calls": [
                       {"name": "write", "arguments": {"path": "/plan.md", "content": NEW_PLAN}}]})
    model.add_rule({"last_tool_result_contains": "wrote"},
                   {"content": "Done: the plan now has the destination and a table."})
    model.add_rule({"last_user_contains": "book the trip"}, {
        "content": "A few questions first.",
        "tool_calls": [{"name": "askUser", "arguments": {"questions": QUESTIONS}}]})
    model.add_rule({"last_tool_result_contains": "Saturday"},
                   {"content": "Saturday morning for two it is."})
    model.add_rule({"last_user_contains": "summarise"},
                   {"error": {"status": 500, "message": "boom"}})
    login(page, web_user)

    # 1. a streamed Markdown answer with a code block
    send(page, "How do I count the words in a file?")
    answer = page.locator("rtc-message-list .md").last
    expect(answer.locator("pre code")).to_contain_text("def count_words", timeout=20000)
    expect(page.locator("rtc-message-list .md .muted")).to_have_count(0, timeout=20000)
    expect(answer.locator("li")).to_have_count(2)
    _shot(page, "widget-answer.png")

    # 2. manual mode: a write over an existing file asks for approval, with a diff
    page.evaluate("""(text) => document.querySelector('rtc-agent').agent.vfs
        .write('/plan.md', text)""", OLD_PLAN)
    page.select_option("rtc-agent select[name=mode]", "manual")
    send(page, "Please update my trip plan")
    approval = page.locator("rtc-approval")
    expect(approval.locator(".diff .add")).to_have_text(
        ["+ - book the train to Lyon", "+ - reserve a table"], timeout=20000)
    expect(approval.locator(".diff .del")).to_have_text(["- - book the train"])
    # the widget scrolls the buttons into view itself (the preview renders late)
    expect(approval.locator("[data-act=approve]")).to_be_in_viewport(ratio=0.95)
    _shot(page, "widget-approval.png")
    approval.locator("[data-act=approve]").click()
    expect(page.locator("rtc-message-list .md").last).to_contain_text("Done", timeout=20000)

    # 3. askUser
    send(page, "Now book the trip")
    ask = page.locator("rtc-ask-user")
    expect(ask.locator("fieldset")).to_have_count(2, timeout=20000)
    # both calls have the id call_0 (ids are unique per answer only): each shows its own state
    expect(ask).to_have_count(1)
    expect(page.locator("rtc-message-list .tool[data-tool=write]")).to_have_attribute(
        "data-status", "done")
    assert {r["tool_call_id"] for r in _rtcs(page)} == {"call_0"}
    ask.locator("fieldset[data-q='0'] input[value='1']").check()
    ask.locator("fieldset[data-q='1'] input[value='1']").check()
    _shot(page, "widget-ask-user.png")
    ask.locator("[data-act=answer]").click()
    expect(page.locator("rtc-message-list .md").last).to_have_text(
        "Saturday morning for two it is.", timeout=20000)

    # 4. the file panel with the file open
    page.click("rtc-agent header [data-act=files]")
    page.click("rtc-file-panel li[data-path='/plan.md']")
    expect(page.locator("rtc-file-panel pre")).to_have_text(NEW_PLAN)
    _shot(page, "widget-files.png")
    page.click("rtc-agent header [data-act=files]")

    # 5. a failed turn: the error message with Retry
    page.click("rtc-session-list [data-act=new]")
    send(page, "Please summarise the trip")
    error = page.locator("rtc-message-list .error")
    expect(error.locator("button[data-retry]")).to_be_visible(timeout=30000)
    _shot(page, "widget-error.png")
    assert page.errors == []
