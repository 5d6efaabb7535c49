"""The element's events, as DOM events and `on.*` callbacks (issue 13, item 2): ready,
connection state, auth, before-message-send cancelling and rewriting, message sent/received,
session created/switched/renamed/deleted."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import expose_tokens, integration_html, send, serve_page, wait_connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PAGE = """
import { createRtcAgent } from '/static/rtc-agent/rtc-agent.js';
window.cb = []; window.dom = [];
const keep = (name) => (detail) => {
  window.cb.push([name, JSON.parse(JSON.stringify(detail ?? {}))]);
};
const names = ['ready', 'connectionStateChange', 'authLogin', 'messageSent', 'messageReceived',
  'sessionCreated', 'sessionSwitched', 'sessionRenamed', 'sessionDeleted', 'themeChange',
  'langChange', 'beforeDestroy'];
const on = Object.fromEntries(names.map((n) => [n, keep(n)]));
// Rewrite: a signature on every message; "forbidden" cancels from the callback.
on.beforeMessageSend = ({ message }) => {
  if (message.content.includes('forbidden')) return false;
  message.content += ' (from Shop)';
  return true;
};
const agent = createRtcAgent({ auth: { getToken: () => window.rtcTestToken(900) }, on });
for (const type of Object.values(window.RtcAgent.events)) {
  agent.addEventListener(type, (e) => window.dom.push(type));
}
// A DOM listener cancels messages with "secret".
agent.addEventListener('rtc-before-message-send', (e) => {
  if (e.detail.message.content.includes('secret')) e.preventDefault();
});
document.body.append(agent);
agent.setAttribute('open', '');
window.agent = agent;
"""


def _names(ipage: Any) -> list[str]:
    return [name for name, _ in ipage.evaluate("window.cb")]


def _detail(ipage: Any, name: str) -> list[dict[str, Any]]:
    return [d for n, d in ipage.evaluate("window.cb") if n == name]


def test_events_from_start_to_a_deleted_session(
        ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "hello there (from Shop)"},
                   {"content": "Hi from the agent"})
    expose_tokens(ipage, web_user)
    serve_page(ipage, integration_html(PAGE))
    wait_connected(ipage)
    ipage.wait_for_function("window.cb.some(([n]) => n === 'ready')")
    states = [d["state"] for d in _detail(ipage, "connectionStateChange")]
    assert states[:2] == ["connecting", "connected"]
    assert _detail(ipage, "authLogin")[0] == {"userId": str(web_user.pk), "refreshed": False}

    # cancelled by a DOM listener: nothing sent, the text stays, the composer says why
    send(ipage, "my secret plan")
    notice = ipage.locator("rtc-composer .notice")
    expect(notice).to_contain_text("kept this message from being sent")
    assert ipage.locator("rtc-composer textarea").input_value() == "my secret plan"
    # cancelled by the callback
    send(ipage, "a forbidden word")
    ipage.wait_for_timeout(500)
    assert ipage.locator("rtc-composer textarea").input_value() == "a forbidden word"
    assert model.requests == [] and "messageSent" not in _names(ipage)

    # rewritten: the model gets the signature
    send(ipage, "hello there")
    answer = ipage.locator("rtc-message-list .md").last
    expect(answer).to_have_text("Hi from the agent", timeout=20000)
    ipage.wait_for_function("window.cb.some(([n]) => n === 'messageReceived')")
    last_user = [m for m in model.requests[0].body["messages"] if m["role"] == "user"][-1]
    assert "hello there (from Shop)" in str(last_user["content"])
    sent = _detail(ipage, "messageSent")
    assert len(sent) == 1 and sent[0]["message"]["content"] == "hello there (from Shop)"
    sid = sent[0]["message"]["session_id"]
    assert _detail(ipage, "sessionCreated")[0]["session"]["id"] == sid
    assert {"id": sid} in _detail(ipage, "sessionSwitched")
    received = _detail(ipage, "messageReceived")
    assert len(received) == 1 and received[0]["message"]["role"] == "assistant"
    assert received[0]["message"]["session_id"] == sid

    ipage.evaluate(f"window.agent.agent.rename('{sid}', 'Cart questions')")
    ipage.wait_for_function("window.cb.some(([n]) => n === 'sessionRenamed')")
    assert _detail(ipage, "sessionRenamed") == [{"id": sid, "title": "Cart questions"}]
    ipage.evaluate(f"window.agent.agent.remove('{sid}')")
    ipage.wait_for_function("window.cb.some(([n]) => n === 'sessionDeleted')")
    assert _detail(ipage, "sessionDeleted") == [{"id": sid}]
    assert _detail(ipage, "sessionSwitched")[-1] == {"id": None}

    # the same events reach DOM listeners (tool call events are callbacks only)
    dom = set(ipage.evaluate("window.dom"))
    for name in ("ready", "connection-state-change", "auth-login", "message-sent",
                 "message-received", "session-created", "session-switched", "session-renamed",
                 "session-deleted", "before-message-send"):
        assert (f"rtc-agent-{name}" if name == "ready" else f"rtc-{name}") in dom, name
    ipage.evaluate("window.agent.destroy()")
    assert _names(ipage)[-1] == "beforeDestroy"
    assert "rtc-before-destroy" in ipage.evaluate("window.dom")
    assert ipage.errors == []
