"""createRtcAgent, the HTML attributes and JS properties, and destroy() (issue 13, item 1)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import expose_tokens, integration_html, serve_page, wait_connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

IMPORT = "import { createRtcAgent } from '/static/rtc-agent/rtc-agent.js';"


def _sockets(ipage: Any) -> list[Any]:
    sockets: list[Any] = []
    ipage.on("websocket", lambda ws: sockets.append(ws))
    return sockets


def test_factory_returns_an_element_that_connects_only_once_appended(
        ipage: Any, web: Any, web_user: Any) -> None:
    expose_tokens(ipage, web_user)
    sockets = _sockets(ipage)
    serve_page(ipage, integration_html(IMPORT + """
        window.seen = [];
        window.agent = createRtcAgent({
          appLabel: 'Shop helper', theme: 'dark', lang: 'en-US', databaseName: 'shop-rtc',
          server: { url: location.origin, redirectUri: '/auth/done.html' },
          auth: { getToken: () => window.rtcTestToken(900) },
          on: { ready: () => window.seen.push('ready') },
        });
        window.before = { connected: agent.isConnected,
                          inBody: !!document.querySelector('rtc-agent') };
    """))
    ipage.wait_for_function("window.before")
    ipage.wait_for_timeout(300)
    assert ipage.evaluate("window.before") == {"connected": False, "inBody": False}
    assert sockets == []  # nothing opens before the ipage appends it
    ipage.evaluate("document.body.append(window.agent); window.agent.setAttribute('open', '')")
    wait_connected(ipage)
    ipage.wait_for_function("window.seen.includes('ready')")
    assert len(sockets) == 1
    props = ipage.evaluate("""() => ({
        label: agent.appLabel, theme: agent.theme,
        resolved: agent.getAttribute('data-resolved-theme'),
        db: agent.databaseName, server: agent.serverUrl, redirect: agent.redirectUri,
        title: agent.shadowRoot.querySelector('header .label').textContent,
        bubble: agent.shadowRoot.querySelector('.bubble').getAttribute('aria-label'),
        factory: typeof window.RtcAgent.createRtcAgent })""")
    origin = ipage.evaluate("location.origin")
    assert props == {"label": "Shop helper", "theme": "dark", "resolved": "dark", "db": "shop-rtc",
                     "server": origin, "redirect": f"{origin}/auth/done.html",
                     "title": "Shop helper", "bubble": "Close Shop helper",
                     "factory": "function"}
    # database-name: the IndexedDB database is <prefix>-<user id>
    names = ipage.evaluate("async () => (await indexedDB.databases()).map((d) => d.name)")
    assert f"shop-rtc-{web_user.pk}" in names


def test_html_attributes_and_the_old_server_attribute(ipage: Any, web: Any, web_user: Any) -> None:
    expose_tokens(ipage, web_user)
    serve_page(ipage, integration_html(
        "document.getElementById('agent').getToken = () => window.rtcTestToken(900);",
        body=f"""<rtc-agent id="agent" server="{web.http_url}" app-label="Help desk" open
          bubble-icon='<svg viewBox="0 0 10 10"><circle cx="5" cy="5" r="4"/>
            <script>window.hacked = 1</script></svg>'
          logo='<svg viewBox="0 0 10 10" onload="window.hacked = 2">
            <rect width="10" height="10"/></svg>'
          theme="light" lang="zh-CN"></rtc-agent>""",
        head='<script type="module" src="/static/rtc-agent/rtc-agent.js"></script>'))
    expect(ipage.locator("rtc-agent .conn")).to_have_text("已连接", timeout=15000)
    shadow = ipage.evaluate("""() => {
        const r = document.getElementById('agent').shadowRoot;
        return { label: r.querySelector('header .label').textContent,
                 icon: r.querySelector('.bubble svg circle') !== null,
                 logo: r.querySelector('header .logo svg rect') !== null,
                 logoShown: !r.querySelector('header .logo').hidden,
                 files: r.querySelector('[data-act=files]').textContent,
                 hacked: window.hacked || 0 };
    }""")
    assert shadow == {"label": "Help desk", "icon": True, "logo": True, "logoShown": True,
                      "files": "文件", "hacked": 0}


def test_window_and_activity_bar_properties(ipage: Any, web: Any, web_user: Any) -> None:
    expose_tokens(ipage, web_user)
    serve_page(ipage, integration_html(IMPORT + """
        const a = createRtcAgent({ auth: { getToken: () => window.rtcTestToken(900) },
          window: { bubblePosition: { corner: 'top-left', offset: { x: 30, y: -40 } },
                    initialSize: { width: 420, height: 500 }, showMaximize: false,
                    defaultMode: 'normal' },
          activityBar: { disabledActivities: ['files'], enableFunctionDebugger: false } });
        document.body.append(a);
        window.agent = a;
    """))
    wait_connected(ipage)
    box = ipage.locator("rtc-agent .bubble").bounding_box()
    assert (round(box["x"]), round(box["y"])) == (30, 40)
    panel = ipage.locator("rtc-agent .panel").bounding_box()
    assert (round(panel["width"]), round(panel["height"])) == (420, 500)
    assert panel["y"] > box["y"]  # opens below a top-left bubble
    for act, visible in [("files", False), ("functions", False), ("max", False), ("min", True),
                         ("memories", True)]:
        assert ipage.locator(f"rtc-agent header [data-act={act}]").is_visible() is visible, act
    # embedded: the panel fills its container, no bubble, no window buttons
    ipage.evaluate("""() => {
        const box = document.createElement('div');
        box.id = 'box';
        box.style.cssText = 'width: 700px; height: 480px; position: relative';
        document.body.prepend(box);
        box.append(agent);
        agent.windowConfig = { embedded: true };
    }""")
    wait_connected(ipage)
    container = ipage.locator("#box").bounding_box()
    panel = ipage.locator("rtc-agent .panel").bounding_box()
    assert (round(panel["width"]), round(panel["height"])) == (700, 480)
    assert (panel["x"], panel["y"]) == (container["x"], container["y"])
    assert not ipage.locator("rtc-agent .bubble").is_visible()
    for act in ("min", "max", "close"):
        assert not ipage.locator(f"rtc-agent header [data-act={act}]").is_visible()


def test_destroy_closes_the_socket_and_cancels_pending_token_requests(
        ipage: Any, web: Any, web_user: Any) -> None:
    calls = expose_tokens(ipage, web_user)
    sockets = _sockets(ipage)
    serve_page(ipage, integration_html(IMPORT + """
        window.order = [];
        window.make = (getToken) => {
          const a = createRtcAgent({ auth: { getToken }, on: {
            beforeDestroy: () => window.order.push('beforeDestroy:' + a.isConnected),
            connectionStateChange: ({ state }) => window.order.push('state:' + state) } });
          document.body.append(a);
          return a;
        };
        window.agent = window.make(() => window.rtcTestToken(900));
    """))
    wait_connected(ipage)
    assert len(sockets) == 1 and not sockets[0].is_closed()
    ipage.evaluate("window.agent.destroy()")
    if not sockets[0].is_closed():
        sockets[0].wait_for_event("close", timeout=5000)
    assert sockets[0].is_closed()
    assert ipage.evaluate("document.querySelector('rtc-agent')") is None
    order = ipage.evaluate("window.order")
    assert order[0] == "state:connecting" and "state:connected" in order
    assert order[-1] == "beforeDestroy:true"  # fired first, while still on the ipage
    tokens_after_destroy = len(calls)
    ipage.wait_for_timeout(1500)
    assert len(calls) == tokens_after_destroy and len(sockets) == 1
    # A token request still pending at destroy(): rejected, and its late answer opens nothing.
    ipage.evaluate("""() => {
        window.release = null;
        window.late = window.make(() => new Promise((resolve) => { window.release = resolve; }));
    }""")
    ipage.wait_for_function("window.release !== null")
    ipage.evaluate("window.late.destroy()")
    ipage.evaluate("window.rtcTestToken(900).then((t) => window.release(t))")
    ipage.wait_for_timeout(1500)
    assert len(sockets) == 1
    assert ipage.errors == []
