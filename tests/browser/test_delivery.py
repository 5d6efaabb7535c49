"""100 % delivery: a finished tool's result survives a reload while the socket is down, is
delivered once afterwards, and the tool is never run again."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login, send, wait_connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

REGISTER = """() => {
  window.__release = null;
  rtcAgent.registerFunction({ name: 'slowOp', class: 'read', description: 'waits for the test',
    handler: () => {
      localStorage.setItem('runs', String(Number(localStorage.getItem('runs') || 0) + 1));
      return new Promise((resolve) => { window.__release = () => resolve('slow done'); }); } });
}"""


def test_outbox_survives_a_reload_while_offline(page: Any, context: Any, web: Any, worker: Any,
                                                model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "slow"}, {"tool_calls": [
        {"name": "script", "arguments": {"action": "eval",
                                         "code": "return await rtcAgent.callFunction('slowOp')"}}]})
    model.add_rule({"last_tool_result_contains": "slow done"}, {"content": "Finished."})
    login(page, web_user)
    page.evaluate(REGISTER)
    page.select_option("rtc-agent select[name=mode]", "bypass")
    send(page, "slow work")
    page.wait_for_function("() => typeof window.__release === 'function'", timeout=20000)
    # the socket goes down and stays down (new sockets are refused), the HTTP twin fails too
    context.route_web_socket("**/connection/websocket", lambda ws: ws.close())
    context.route("**/api/rtc/**", lambda route: route.abort())
    page.evaluate("document.querySelector('rtc-agent').agent.conn.client.disconnect()")
    page.evaluate("window.__release()")
    expect(page.locator("rtc-message-list .tool")).to_contain_text("delivering result",
                                                                  timeout=10000)
    stored = page.evaluate("""async () => (await document.querySelector('rtc-agent').agent
        .outbox.pending()).map((e) => [e.body.success, e.body.result && e.body.result.result])""")
    assert stored == [[True, "slow done"]]
    # reload while offline: the stored state is shown, the tool is not run again
    page.wait_for_timeout(300)  # the state snapshot is saved at most 150 ms after a change
    page.reload()
    page.evaluate(REGISTER)
    expect(page.locator("rtc-message-list .tool")).to_contain_text("delivering result",
                                                                  timeout=10000)
    page.wait_for_timeout(1500)
    assert page.evaluate("localStorage.getItem('runs')") == "1"
    assert len(model.requests) == 1
    # back online: the result is delivered once and the turn completes
    context.unroute_all()
    context.route_web_socket("**/connection/websocket", lambda ws: ws.connect_to_server())
    wait_connected(page)
    expect(page.locator("rtc-message-list .md").last).to_have_text("Finished.", timeout=40000)
    assert page.evaluate("localStorage.getItem('runs')") == "1"
    assert page.evaluate("(async () => (await document.querySelector('rtc-agent').agent"
                         ".outbox.pending()).length)()") == 0
    tool_msgs = [m for m in model.requests[-1].body["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 1 and '"slow done"' in tool_msgs[0]["content"]
    assert len(model.requests) == 2
