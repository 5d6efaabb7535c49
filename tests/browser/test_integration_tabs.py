"""Two tabs, one connection (issue 13, item 6; opt-in `shareConnection`): only the leading tab
opens a WebSocket, the other follows it; a tool call runs once; when the leading tab closes
the other takes over."""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import expose_tokens, integration_html, send, serve_page, wait_connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PAGE = """
import { createRtcAgent } from '/static/rtc-agent/rtc-agent.js';
const agent = createRtcAgent({
  shareConnection: true,
  auth: { getToken: () => window.rtcTestToken(900) },
  functions: [{ name: 'stamp', description: 'Stamp the cart', class: 'write', handler: async () => {
    const runs = JSON.parse(localStorage.getItem('stamps') || '[]');
    runs.push(document.title);
    localStorage.setItem('stamps', JSON.stringify(runs));
    await new Promise((resolve) => setTimeout(resolve, window.stampMs || 0)); // a slow tool
    return `stamped ${runs.length}`;
  } }],
});
document.body.append(agent);
agent.setAttribute('open', '');
window.agent = agent;
"""


def _tab(page: Any, user: Any, title: str) -> list[Any]:
    expose_tokens(page, user)
    sockets: list[Any] = []
    page.on("websocket", lambda ws: sockets.append(ws))
    html = PAGE.replace("document.body.append",
                        f"document.title = '{title}';\ndocument.body.append")
    serve_page(page, integration_html(html))
    return sockets


def _stamp_rules(model: Any) -> None:
    """The model calls the page's ``stamp`` tool when asked, and says so once it ran."""
    model.add_rule({"last_user_contains": "stamp it", "tool_offered": "stamp"},
                   {"tool_calls": [{"name": "stamp", "arguments": {}}]})
    model.add_rule({"last_tool_result_contains": "stamped"}, {"content": "Stamped once."})


def _two_tabs_that_stamp(first: Any, model: Any, user: Any) -> tuple[Any, Any, list[Any]]:
    """Two connected tabs of ``user`` on the integration page, the model asked to stamp: the
    first tab, the second, and the sockets the second opened."""
    _stamp_rules(model)
    _tab(first, user, "first")
    wait_connected(first)
    second = first.context.new_page()
    second_sockets = _tab(second, user, "second")
    wait_connected(second)
    return first, second, second_sockets


def test_two_tabs_share_one_socket_and_run_a_tool_once(
        ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    _stamp_rules(model)
    model.add_rule({"last_user_contains": "still there"}, {"content": "The second tab leads now."})
    first = ipage
    first_sockets = _tab(first, web_user, "first")
    wait_connected(first)
    second = first.context.new_page()
    second.errors = []
    second.on("pageerror", lambda exc: second.errors.append(str(exc)))
    second_sockets = _tab(second, web_user, "second")
    wait_connected(second)  # through the first tab's socket
    assert len(first_sockets) == 1 and second_sockets == []

    send(second, "please stamp it")
    expect(second.locator("rtc-message-list .md").last).to_have_text("Stamped once.",
                                                                     timeout=20000)
    # the first tab saw the same session arrive (it shows it when picked)
    first.locator("rtc-session-list li .pick").first.click()
    expect(first.locator("rtc-message-list .md").last).to_have_text("Stamped once.")
    assert json.loads(first.evaluate("localStorage.getItem('stamps')")) in (["first"], ["second"])
    results = [m["content"] for m in model.requests[-1].body["messages"] if m["role"] == "tool"]
    assert results == ["stamped 1"]
    assert second_sockets == []

    # the leading tab closes: the other takes over with a socket of its own
    first.close()
    second.wait_for_function("document.querySelector('rtc-agent').agent.conn.role === 'leader'",
                             timeout=15000)
    wait_connected(second)
    assert len(second_sockets) == 1
    send(second, "are you still there?")
    answer = second.locator("rtc-message-list .md").last
    expect(answer).to_have_text("The second tab leads now.", timeout=20000)
    assert second.errors == []


# In the tab it runs in: its claims of a call (`executing`) wait until another tab's claim has
# reached this tab's state, or at most `ms`. A claim made while the other tab's tool still runs
# is the interleaving the server answers as a repeated report (success), not a refusal.
CLAIM_LATE = """(ms) => {
  const agent = window.agent.agent;
  const rpc = agent.conn.rpc.bind(agent.conn);
  agent.conn.rpc = async (method, data) => {
    if (method === 'v1.rtc.update_status' && data.status === 'executing') {
      const until = Date.now() + ms;
      const rtc = () => agent.store.state.rtcs[data.rtc_id] || {};
      while (rtc().status !== 'executing' && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    }
    return rpc(method, data);
  };
}"""


def test_two_tabs_that_both_see_a_call_run_it_once(
        ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    first, second, second_sockets = _two_tabs_that_stamp(ipage, model, web_user)
    for tab in (first, second):
        tab.evaluate("window.stampMs = 1500")
    second.evaluate(CLAIM_LATE, 3000)
    send(first, "please stamp it")
    expect(first.locator("rtc-message-list .md").last).to_have_text("Stamped once.",
                                                                    timeout=20000)
    assert json.loads(first.evaluate("localStorage.getItem('stamps')")) in (["first"], ["second"])
    results = [m["content"] for m in model.requests[-1].body["messages"] if m["role"] == "tool"]
    assert results == ["stamped 1"] and second_sockets == []
    from apps.rtc.models import Rtc

    assert [r.status for r in Rtc.objects.all()] == ["completed"]


def test_a_result_the_leading_tab_could_not_deliver_is_delivered_by_the_next(
        ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    first, second, second_sockets = _two_tabs_that_stamp(ipage, model, web_user)
    first.select_option("rtc-agent select[name=mode]", "manual")  # class write: asks in manual
    first.evaluate("window.agent.agent.outbox.paused = true")  # it will hold the result
    send(first, "please stamp it")
    first.locator("rtc-approval [data-act=approve]").click(timeout=20000)
    first.wait_for_function("localStorage.getItem('stamps') !== null")
    first.wait_for_function("window.agent.agent.outbox.pending().then((p) => p.length === 1)")
    assert not any(m["role"] == "tool" for m in model.requests[-1].body["messages"])
    first.close()  # the result is only in the shared outbox now
    second.wait_for_function("document.querySelector('rtc-agent').agent.conn.role === 'leader'",
                             timeout=15000)
    second.locator("rtc-session-list li .pick").first.click()
    expect(second.locator("rtc-message-list .md").last).to_have_text("Stamped once.",
                                                                     timeout=20000)
    assert json.loads(second.evaluate("localStorage.getItem('stamps')")) == ["first"]
    results = [m["content"] for m in model.requests[-1].body["messages"] if m["role"] == "tool"]
    assert results == ["stamped 1"] and len(second_sockets) == 1
    # the approval the second tab had also asked for went away when the first answered it
    assert second.evaluate("Object.keys(document.querySelector('rtc-agent').agent"
                           ".store.state.prompts || {}).length") == 0
