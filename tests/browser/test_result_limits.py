"""A tool result too large for the server's frame limit fails the call once, with a message the
model reads; the widget's outbox does not resend it for ever (hardening issue, break 10)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login, send
from tests.livesrv import LiveServer, start_daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FRAME = 8192  # the server tells the widget: results up to FRAME - 4096 bytes


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_daphne(tmp_path_factory.mktemp("web-limits"), DJANGO_DEBUG="true",
                          RTC_MODEL="scripted-model", RTC_MAX_FRAME_BYTES=str(FRAME))
    yield server
    server.stop()


def test_an_oversized_result_becomes_one_error_the_model_sees(
    page: Any, web: Any, worker: Any, model: Any, web_user: Any
) -> None:
    from apps.rtc.models import Rtc

    big = "0123456789abcdef\n" * 600  # 10 KiB: its frame would be refused with 3501
    model.add_rule({"last_user_contains": "big"}, {"tool_calls": [
        {"id": "w", "name": "write", "arguments": {"path": "/big.txt", "content": big}}]})
    model.add_rule({"last_tool_result_contains": "wrote"}, {"tool_calls": [
        {"id": "r", "name": "read", "arguments": {"path": "/big.txt"}}]})
    model.add_rule({"last_tool_result_contains": "[Tool Error]"}, {"content": "Too big, noted."})
    login(page, web_user)
    send(page, "read the big file")
    expect(page.locator("rtc-message-list .md").last).to_have_text("Too big, noted.",
                                                                     timeout=30000)
    tool_messages = [m["content"] for m in model.requests[-1].body["messages"]
                     if m["role"] == "tool"]
    assert tool_messages[-1].startswith("[Tool Error] the tool's result was ")
    assert tool_messages[-1].endswith(
        f"over the limit of {FRAME - 4096} bytes; ask for a smaller part (a range of lines, a "
        "narrower search, a summary)")
    read = Rtc.objects.get(user=web_user, tool_name="read")
    assert read.status == "failed" and read.result is None
    assert page.evaluate("""async () => (await document.querySelector('rtc-agent')
                            .agent.outbox.pending()).length""") == 0
    assert page.errors == []
