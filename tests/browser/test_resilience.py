"""No duplicates when things break mid-turn: the web process killed (SIGKILL) and restarted on
the same port, and the page reloaded in the middle of a tool call. Each tool runs once (its
handler counts its runs in localStorage), the model gets each result once, every message is
rendered once."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login, send, wait_connected
from tests.livesrv import LiveServer, start_daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# A page function of class "write" (manual mode asks first) that counts its runs; `hold` makes
# it wait for window.__release() (a tool that is still running).
REGISTER = """(hold) => rtcAgent.registerFunction({ name: 'stamp', class: 'write',
  description: 'Stamps a label',
  parameters: {type: 'object', properties: {label: {type: 'string'}}},
  handler: ({label}) => {
    const n = Number(localStorage.getItem('stamp-runs') || 0) + 1;
    localStorage.setItem('stamp-runs', String(n));
    if (!hold) return `stamped ${label} (run ${n})`;
    return new Promise((resolve) => { window.__release = () => resolve(`stamped ${label}`); });
  } })"""

FINAL = ("The stamp is on the page now. Every word of this answer is streamed slowly so that "
         "the web process can be killed while it is still being written.")


def _runs(page: Any) -> int:
    return int(page.evaluate("localStorage.getItem('stamp-runs') || '0'"))


def _current_session(page: Any) -> str:
    return page.evaluate("document.querySelector('rtc-agent').agent.store.state.currentSession")


def _tool_results(model: Any) -> list[str]:
    return [m["content"] for m in model.requests[-1].body["messages"] if m["role"] == "tool"]


def _assert_rendered_once(page: Any) -> None:
    """Every node of the message list is a distinct message (no id twice)."""
    ids = page.evaluate("""() => [...document.querySelector('rtc-agent').shadowRoot
        .querySelector('rtc-message-list').shadowRoot.querySelectorAll('.msg')]
        .map((n) => n.dataset.id)""")
    assert ids and len(ids) == len(set(ids)), ids


def _server_state(session_id: str) -> dict[str, Any]:
    from apps.rtc.models import Rtc
    from apps.sessions.models import Message
    from apps.turns.models import Turn

    messages = Message.objects.filter(session_id=session_id, deleted_at__isnull=True)
    return {
        "messages": Counter(m.content.get("type") for m in messages),
        "rtcs": list(Rtc.objects.filter(session_id=session_id).values_list("status", flat=True)),
        "turns": list(Turn.objects.filter(session_id=session_id).values_list("status", flat=True)),
    }


class Restartable:
    """A Daphne of this test alone (killing it must not disturb the shared one)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.starts = 0
        self.server = self._start(0)

    def _start(self, port: int) -> LiveServer:
        self.starts += 1
        log_dir = self.log_dir / f"run{self.starts}"  # start_daphne names the log by port
        log_dir.mkdir()
        return start_daphne(log_dir, port=port, DJANGO_DEBUG="true", RTC_MODEL="scripted-model")

    def kill_and_restart(self, page: Any) -> None:
        self.server.proc.send_signal(signal.SIGKILL)
        self.server.proc.wait(10)
        # the widget notices: the header leaves "connected"
        expect(page.locator("rtc-agent .conn")).not_to_have_text("connected", timeout=10000)
        self.server = self._start(self.server.port)

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def own_web(web: LiveServer, tmp_path: Path) -> Iterator[Restartable]:
    server = Restartable(tmp_path)
    yield server
    server.stop()


def test_web_process_killed_and_restarted_mid_turn(chromium: Any, own_web: Restartable,
                                                   worker: Any, model: Any,
                                                   web_user: Any) -> None:
    model.add_rule({"last_user_contains": "stamp it"}, {"content": "Stamping.", "tool_calls": [
        {"name": "stamp", "arguments": {"label": "A"}}]})
    model.add_rule({"last_tool_result_contains": "stamped A"},
                   {"content": FINAL, "chunk_size": 6, "chunk_delay": 0.12})
    context = chromium.new_context(base_url=own_web.server.http_url,
                                   viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        login(page, web_user, mode="manual")
        page.evaluate(REGISTER, False)
        send(page, "stamp it please")
        approve = page.locator("rtc-approval [data-act=approve]")
        expect(approve).to_be_visible(timeout=20000)

        # 1. killed while the call waits for approval: the widget reconnects by itself
        own_web.kill_and_restart(page)
        wait_connected(page)
        expect(approve).to_be_visible()
        approve.click()

        # 2. killed while the final answer streams
        answer = page.locator("rtc-message-list .md").last
        expect(answer).to_contain_text("The stamp is on", timeout=20000)
        expect(page.locator("rtc-message-list .md .muted")).to_have_count(1)  # still streaming
        own_web.kill_and_restart(page)
        wait_connected(page)
        expect(answer).to_have_text(FINAL, timeout=30000)
        expect(page.locator("rtc-message-list .md .muted")).to_have_count(0)
        page.wait_for_timeout(500)  # anything duplicated would have arrived by now

        # what the user sees: one question, one tool call (done), each answer once
        expect(page.locator("rtc-message-list .user")).to_have_count(1)
        expect(page.locator("rtc-message-list .tool")).to_have_count(1)
        expect(page.locator("rtc-message-list .tool[data-status=done]")).to_have_count(1)
        expect(page.locator("rtc-message-list .md", has_text="Stamping.")).to_have_count(1)
        expect(page.locator("rtc-message-list .md", has_text="The stamp is on")).to_have_count(1)
        _assert_rendered_once(page)
        # the tool ran once, the model got its result once
        assert _runs(page) == 1
        assert len(model.requests) == 2
        assert _tool_results(model) == ["stamped A (run 1)"]
        state = _server_state(_current_session(page))
        assert state["rtcs"] == ["completed"]
        assert state["turns"] == ["completed"]
        assert state["messages"] == {"user_message": 1, "markdown": 2, "toolcall_input": 1,
                                     "toolcall_output": 1}, state
        assert errors == []
    finally:
        context.close()


def test_reload_while_the_call_awaits_approval(page: Any, web: Any, worker: Any, model: Any,
                                               web_user: Any) -> None:
    model.add_rule({"last_user_contains": "stamp it"}, {"tool_calls": [
        {"name": "stamp", "arguments": {"label": "B"}}]})
    model.add_rule({"last_tool_result_contains": "stamped B"}, {"content": "Stamped once."})
    login(page, web_user, mode="manual")
    page.evaluate(REGISTER, False)
    send(page, "stamp it please")
    expect(page.locator("rtc-approval [data-act=approve]")).to_be_visible(timeout=20000)
    page.wait_for_timeout(300)  # the state snapshot is saved at most 150 ms after a change
    page.reload()
    page.evaluate(REGISTER, False)
    page.click("rtc-agent .bubble")
    wait_connected(page)
    # the same question again (nothing ran yet), answered once
    page.locator("rtc-approval [data-act=approve]").click(timeout=15000)
    expect(page.locator("rtc-message-list .md").last).to_have_text("Stamped once.", timeout=20000)
    page.wait_for_timeout(500)
    assert _runs(page) == 1
    assert len(model.requests) == 2
    assert _tool_results(model) == ["stamped B (run 1)"]
    expect(page.locator("rtc-message-list .tool")).to_have_count(1)
    expect(page.locator("rtc-message-list .tool[data-status=done]")).to_have_count(1)
    _assert_rendered_once(page)
    state = _server_state(_current_session(page))
    assert state["rtcs"] == ["completed"]
    assert state["messages"]["toolcall_output"] == 1
    assert page.errors == []


def test_reload_while_the_tool_runs_does_not_run_it_again(page: Any, web: Any, worker: Any,
                                                          model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "stamp it"}, {"tool_calls": [
        {"name": "stamp", "arguments": {"label": "C"}}]})
    model.add_rule({"last_role": "tool"}, {"content": "Noted."})
    login(page, web_user, mode="bypass")
    page.evaluate(REGISTER, True)
    send(page, "stamp it please")
    page.wait_for_function("() => typeof window.__release === 'function'", timeout=20000)
    expect(page.locator("rtc-message-list .tool[data-status=running]")).to_have_count(1)
    page.wait_for_timeout(300)
    page.reload()  # the handler's promise dies with the page
    page.evaluate(REGISTER, True)
    page.click("rtc-agent .bubble")
    expect(page.locator("rtc-message-list .md").last).to_have_text("Noted.", timeout=20000)
    page.wait_for_timeout(500)
    assert _runs(page) == 1  # reported as failed rather than run a second time
    assert len(model.requests) == 2
    (result,) = _tool_results(model)
    assert result.startswith("[Tool Error] the page was reloaded while this tool ran")
    expect(page.locator("rtc-message-list .tool[data-status=failed]")).to_have_count(1)
    _assert_rendered_once(page)
    state = _server_state(_current_session(page))
    assert state["rtcs"] == ["failed"]
    assert state["messages"]["toolcall_output"] == 1
    assert page.errors == []
