"""The widget in a real browser: connection, streaming, Markdown safety."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login, send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_widget_connects_and_shows_connected(page: Any, web: Any, web_user: Any) -> None:
    login(page, web_user)
    expect(page.locator("rtc-agent .conn")).to_have_text("connected")
    assert page.errors == []


def test_answer_streams_and_markdown_is_rendered_safely(page: Any, web: Any, worker: Any,
                                                        model: Any, web_user: Any) -> None:
    evil = ("**Bold** and `code`.\n\n<img src=x onerror=\"window.__pwned=1\">\n\n"
            "<script>window.__pwned=2</script>\n\n[link](javascript:window.__pwned=3)\n\n"
            "```js\nconsole.log('hi')\n```\n")
    model.add_rule({"last_user_contains": "hello"},
                   {"content": evil, "chunk_size": 6, "chunk_delay": 0.03,
                    "reasoning": "Thinking about markdown."})
    login(page, web_user)
    send(page, "hello there")
    answer = page.locator("rtc-message-list .md").last
    expect(answer.locator("strong")).to_have_text("Bold", timeout=15000)
    # streamed: the text grew in several renders before the final message replaced it
    expect(page.locator("rtc-message-list .md pre code")).to_contain_text("console.log('hi')")
    expect(page.locator("rtc-message-list .md .muted")).to_have_count(0, timeout=15000)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("rtc-message-list img").count() == 0
    assert page.locator("rtc-message-list script").count() == 0
    assert page.locator("rtc-message-list [onerror]").count() == 0
    assert page.locator("rtc-message-list a[href^=javascript]").count() == 0
    # raw HTML is shown as text, never interpreted
    expect(answer).to_contain_text("<img src=x onerror=")
    expect(answer).to_contain_text("<script>")
    # thinking is collapsed
    thinking = page.locator("rtc-message-list details.thinking")
    expect(thinking).to_have_count(1)
    assert thinking.get_attribute("open") is None
    # code blocks can be copied
    page.locator("rtc-message-list .md pre button.copy").click()
    assert page.evaluate("navigator.clipboard.readText()").strip() == "console.log('hi')"
    assert page.errors == []


def test_chunks_are_shown_before_the_final_message(page: Any, web: Any, worker: Any,
                                                    model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "slow"},
                   {"content": "one two three four five six seven eight", "chunk_size": 4,
                    "chunk_delay": 0.4})
    login(page, web_user)
    page.evaluate("""() => { window.__seen = [];
      const tick = () => { const el = document.querySelector('rtc-agent').shadowRoot
        .querySelector('rtc-message-list').shadowRoot.querySelector('.md');
        if (el) window.__seen.push(el.textContent); requestAnimationFrame(tick); }; tick(); }""")
    send(page, "slow answer please")
    expect(page.locator("rtc-message-list .md").last).to_contain_text("seven eight", timeout=20000)
    seen = page.evaluate("window.__seen")
    partial = {s.strip(" ▍") for s in seen if s and "eight" not in s}
    assert len(partial) >= 3, seen  # the answer grew chunk by chunk


def test_reload_recovers_the_topic_from_the_stored_position(page: Any, web: Any, worker: Any,
                                                            model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "first"}, {"content": "First answer."})
    login(page, web_user)
    send(page, "first question")
    expect(page.locator("rtc-message-list .md").last).to_have_text("First answer.", timeout=20000)
    page.wait_for_timeout(400)  # the snapshot is saved at most 150 ms after a change
    frames: list[str] = []
    page.on("websocket", lambda ws: (ws.on("framesent", lambda f: frames.append(">" + f)),
                                     ws.on("framereceived", lambda f: frames.append("<" + f))))
    page.reload()
    expect(page.locator("rtc-agent .conn")).to_have_text("connected", timeout=15000)
    expect(page.locator("rtc-message-list .md").last).to_have_text("First answer.")
    page.wait_for_timeout(300)
    connect = next(f for f in frames if '"connect"' in f)
    assert '"recover":true' in connect and '"epoch"' in connect
    assert any('"recovered":true' in f for f in frames if f.startswith("<"))
    assert not any("v1.session.list" in f for f in frames)  # no full reload was needed
