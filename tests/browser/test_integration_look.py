"""Themes, CSS custom properties, languages, a 360 px phone, the keyboard and axe-core (issue 13,
item 5)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import expose_tokens, integration_html, send, serve_page, wait_connected
from tests.browser.test_integration_functions import PAGE as FUNCTIONS_PAGE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
IMPORT = "import { createRtcAgent } from '/static/rtc-agent/rtc-agent.js';\n"
STYLE = ("<style>rtc-agent { --rtc-bubble-size: 44px; --rtc-color-accent: rgb(200, 0, 100); }"
         "</style>")


def _css(ipage: Any, selector: str, prop: str) -> str:
    return ipage.evaluate(f"""() => getComputedStyle(document.querySelector('rtc-agent').shadowRoot
        .querySelector('{selector}')).getPropertyValue('{prop}')""")


def test_light_dark_and_system_themes_with_the_page_s_variables(ipage: Any, web: Any,
                                                                web_user: Any) -> None:
    expose_tokens(ipage, web_user)
    ipage.emulate_media(color_scheme="dark")
    serve_page(ipage, integration_html(IMPORT + """
        window.themes = [];
        const a = createRtcAgent({ auth: { getToken: () => window.rtcTestToken(900) },
          on: { themeChange: (d) => window.themes.push(`${d.theme}/${d.resolved}`) } });
        document.body.append(a);
        a.setAttribute('open', '');
        window.agent = a;""", head=STYLE))
    wait_connected(ipage)
    agent = ipage.locator("rtc-agent")
    expect(agent).to_have_attribute("data-resolved-theme", "dark")  # system, the OS says dark
    assert ipage.evaluate("window.agent.theme") == "system"
    assert _css(ipage, ".panel", "background-color") == "rgb(23, 27, 36)"
    ipage.emulate_media(color_scheme="light")
    expect(agent).to_have_attribute("data-resolved-theme", "light")
    assert _css(ipage, ".panel", "background-color") == "rgb(255, 255, 255)"
    ipage.evaluate("window.agent.theme = 'dark'")
    expect(agent).to_have_attribute("data-resolved-theme", "dark")
    # the page's own variables win in both themes
    assert _css(ipage, ".bubble", "background-color") == "rgb(200, 0, 100)"
    assert _css(ipage, ".bubble", "width") == "44px"
    ipage.evaluate("window.RtcAgent.switchTheme('light')")
    expect(agent).to_have_attribute("data-resolved-theme", "light")
    assert ipage.evaluate("localStorage.getItem('rtc-agent-theme')") == "light"
    assert ipage.evaluate("window.themes") == ["system/light", "dark/dark", "light/light"]
    with pytest.raises(Exception, match="theme must be one of"):
        ipage.evaluate("window.agent.theme = 'blue'")


def _words(ipage: Any) -> dict[str, str]:
    return ipage.evaluate("""() => {
        const r = document.querySelector('rtc-agent').shadowRoot;
        const c = r.querySelector('rtc-composer').shadowRoot;
        return { files: r.querySelector('[data-act=files]').textContent,
                 placeholder: c.querySelector('textarea').placeholder,
                 send: c.querySelector('[data-act=send]').textContent,
                 conn: r.querySelector('.conn').textContent };
    }""")


def test_language_from_attribute_then_stored_choice(ipage: Any, web: Any, web_user: Any) -> None:
    expose_tokens(ipage, web_user)
    serve_page(ipage, integration_html(IMPORT + """
        const a = createRtcAgent({ lang: 'zh-CN',
                                   auth: { getToken: () => window.rtcTestToken(900) } });
        document.body.append(a);
        a.setAttribute('open', '');
        window.agent = a;"""))
    expect(ipage.locator("rtc-agent .conn")).to_have_text("已连接", timeout=15000)
    assert _words(ipage) == {"files": "文件", "placeholder": "给助手发消息…", "send": "发送",
                             "conn": "已连接"}
    expect(ipage.locator("rtc-session-list [data-act=new]")).to_have_text("+ 新对话")
    ipage.evaluate("window.agent.lang = 'en-US'")
    assert _words(ipage) == {"files": "Files", "placeholder": "Message the agent…", "send": "Send",
                             "conn": "connected"}
    # no attribute: the stored choice (switchLocale), over the browser's English
    ipage.evaluate("window.agent.removeAttribute('lang'); window.RtcAgent.switchLocale('zh-CN')")
    assert _words(ipage)["files"] == "文件"
    assert ipage.evaluate("localStorage.getItem('rtc-agent-locale')") == "zh-CN"


@pytest.fixture
def chinese_page(integration_chromium: Any, web: Any) -> Iterator[Any]:
    ctx = integration_chromium.new_context(base_url=web.http_url, locale="zh-CN")
    page = ctx.new_page()
    yield page
    ctx.close()


def test_language_from_the_browser(chinese_page: Any, web: Any, web_user: Any) -> None:
    expose_tokens(chinese_page, web_user)
    serve_page(chinese_page, integration_html(IMPORT + """
        const a = createRtcAgent({ auth: { getToken: () => window.rtcTestToken(900) } });
        document.body.append(a);"""))
    expect(chinese_page.locator("rtc-agent .conn")).to_have_text("已连接", timeout=15000)
    assert _words(chinese_page)["files"] == "文件"
    assert chinese_page.locator("rtc-agent .bubble").get_attribute("aria-label") == "打开智能助手"


def test_a_360_px_phone(ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "small screen"}, {"content": "Fits."})
    ipage.set_viewport_size({"width": 360, "height": 740})
    expose_tokens(ipage, web_user)
    serve_page(ipage, integration_html(IMPORT + """
        const a = createRtcAgent({ auth: { getToken: () => window.rtcTestToken(900) } });
        document.body.append(a);"""))
    ipage.locator("rtc-agent .bubble").click()
    wait_connected(ipage)
    panel = ipage.locator("rtc-agent .panel").bounding_box()
    assert panel["x"] >= 0 and panel["x"] + panel["width"] <= 360 and panel["height"] <= 740
    overflow = ipage.evaluate("""() => {
        const p = document.querySelector('rtc-agent').shadowRoot.querySelector('.panel');
        return p.scrollWidth - p.clientWidth; }""")
    assert overflow <= 0
    for act in ("sessions", "files", "close"):
        box = ipage.locator(f"rtc-agent header [data-act={act}]").bounding_box()
        assert box and box["x"] + box["width"] <= 360, act
    textarea = ipage.locator("rtc-composer textarea")
    assert textarea.bounding_box()["width"] > 200
    expect(ipage.locator("rtc-session-list")).to_be_hidden()
    send(ipage, "does it work on a small screen?")
    expect(ipage.locator("rtc-message-list .md").last).to_have_text("Fits.", timeout=20000)
    ipage.click("rtc-agent header [data-act=sessions]")
    expect(ipage.locator("rtc-session-list li")).to_have_count(1)
    ipage.click("rtc-agent header [data-act=sessions]")
    expect(ipage.locator("rtc-session-list")).to_be_hidden()


def _serious(ipage: Any) -> list[str]:
    if not ipage.evaluate("typeof window.axe === 'object'"):
        ipage.add_script_tag(path=str(AXE))
    found = ipage.evaluate("""async () => (await axe.run(document, { resultTypes: ['violations'] }))
        .violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
        .map((v) => `${v.id}: ${v.nodes.map((n) => JSON.stringify(n.target)).join(', ')}`)""")
    return list(found)


@pytest.mark.skipif(not AXE.exists(), reason="axe-core not installed: run `make vendor` (npm ci)")
def test_keyboard_and_axe_on_the_main_states(ipage: Any, web: Any, worker: Any, model: Any,
                                             web_user: Any) -> None:
    answer = "# Title\n\nSome `code` and a [link](https://example.com).\n\n```js\nlet x = 1;\n```"
    model.add_rule({"last_user_contains": "format"}, {"content": answer})
    expose_tokens(ipage, web_user)
    closed = FUNCTIONS_PAGE.replace("agent.setAttribute('open', '');", "")
    serve_page(ipage, integration_html(closed))
    assert _serious(ipage) == []  # the bubble alone
    # the keyboard: Tab reaches the bubble, Enter opens, Tab reaches the message box
    bubble = ipage.locator("rtc-agent .bubble")
    for _ in range(5):
        ipage.keyboard.press("Tab")
        if bubble.evaluate("(b) => b.getRootNode().activeElement === b"):
            break
    ipage.keyboard.press("Enter")
    expect(bubble).to_have_attribute("aria-expanded", "true")
    wait_connected(ipage)
    reached = False
    for _ in range(30):
        ipage.keyboard.press("Tab")
        if ipage.evaluate("""() => { let a = document.activeElement;
            while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
            return a && a.tagName === 'TEXTAREA'; }"""):
            reached = True
            break
    assert reached
    ipage.keyboard.type("format something")
    ipage.keyboard.press("Enter")
    expect(ipage.locator("rtc-message-list .md").last).to_contain_text("Title", timeout=20000)
    assert _serious(ipage) == []  # a conversation
    ipage.evaluate("window.agent.theme = 'dark'")
    assert _serious(ipage) == []  # dark
    ipage.click("rtc-agent header [data-act=functions]")
    ipage.locator("rtc-function-debugger nav button").first.click()
    ipage.locator("rtc-function-debugger [data-act=run]").click()
    expect(ipage.locator("rtc-function-debugger [data-part=status]")).to_contain_text("Succeeded")
    assert _serious(ipage) == []  # the function debugger
    ipage.evaluate("window.agent.theme = 'light'; window.agent.lang = 'zh-CN'")
    ipage.set_viewport_size({"width": 360, "height": 740})
    assert _serious(ipage) == []  # a phone, in Chinese
