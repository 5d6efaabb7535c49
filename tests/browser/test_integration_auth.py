"""The auth modes (issue 13, item 4): a static token, getToken + refreshToken with a token that
expires while connected (refreshed on the same socket), a provider with isLoggedIn / login /
logout, and a failing getToken."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from apps.accounts.tokens import issue_access_token
from tests.browser.conftest import expose_tokens, integration_html, send, serve_page, wait_connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

IMPORT = "import { createRtcAgent } from '/static/rtc-agent/rtc-agent.js';\n"


def _sockets(ipage: Any) -> list[Any]:
    sockets: list[Any] = []
    ipage.on("websocket", lambda ws: sockets.append(ws))
    return sockets


def test_a_static_token(ipage: Any, web: Any, web_user: Any) -> None:
    token = issue_access_token(web_user)
    serve_page(ipage, integration_html(IMPORT + f"""
        const a = createRtcAgent({{ auth: {{ accessToken: '{token}' }} }});
        document.body.append(a);"""))
    wait_connected(ipage)


def test_an_expiring_token_is_refreshed_on_the_same_socket(
        ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "still there"}, {"content": "Yes, still here."})
    calls = expose_tokens(ipage, web_user)
    sockets = _sockets(ipage)
    serve_page(ipage, integration_html(IMPORT + """
        window.states = []; window.refreshes = 0; window.logins = [];
        const a = createRtcAgent({
          auth: {
            getToken: () => window.rtcTestToken(6),          // lives 6 s
            refreshToken: async () => {
              window.refreshes++;
              return { accessToken: await window.rtcTestToken(900) };
            },
          },
          on: { connectionStateChange: ({ state }) => window.states.push(state),
                authLogin: (d) => window.logins.push(d.refreshed) },
        });
        document.body.append(a);
        a.setAttribute('open', '');"""))
    wait_connected(ipage)
    ipage.wait_for_function("window.refreshes >= 1", timeout=20000)
    ipage.wait_for_timeout(1500)
    assert calls[0] == 6 and 900 in calls
    assert ipage.evaluate("window.logins")[:2] == [False, True]
    assert len(sockets) == 1 and not sockets[0].is_closed()
    assert ipage.evaluate("window.states") == ["connecting", "connected"]  # never dropped
    send(ipage, "are you still there?")
    expect(ipage.locator("rtc-message-list .md").last).to_have_text("Yes, still here.",
                                                                    timeout=20000)
    assert len(sockets) == 1


def test_a_provider_signs_in_and_out(ipage: Any, web: Any, web_user: Any) -> None:
    expose_tokens(ipage, web_user)
    sockets = _sockets(ipage)
    serve_page(ipage, integration_html(IMPORT + """
        window.loggedIn = false; window.seen = [];
        const a = createRtcAgent({
          auth: {
            getToken: () => window.rtcTestToken(900),
            isLoggedIn: () => window.loggedIn,
            login: () => { window.loggedIn = true; },
            logout: async () => { window.loggedIn = false; },
          },
          on: { authLoginRequested: () => window.seen.push('requested'),
                authLogout: () => window.seen.push('logout') },
        });
        document.body.append(a);
        a.setAttribute('open', '');
        window.agent = a;"""))
    button = ipage.locator("rtc-agent .signin [data-act=login]")
    expect(button).to_be_visible()
    expect(ipage.locator("rtc-agent .conn")).to_have_text("signed out")
    ipage.wait_for_timeout(500)
    assert sockets == []
    button.click()
    wait_connected(ipage)
    assert ipage.evaluate("window.seen") == ["requested"]
    ipage.evaluate("window.agent.logout()")
    ipage.wait_for_function("window.seen.includes('logout')")
    if not sockets[0].is_closed():
        sockets[0].wait_for_event("close", timeout=5000)
    expect(button).to_be_visible()
    expect(ipage.locator("rtc-agent .conn")).to_have_text("signed out")
    assert ipage.evaluate("window.loggedIn") is False


def test_a_failing_get_token_is_an_auth_error(ipage: Any, web: Any) -> None:
    serve_page(ipage, integration_html(IMPORT + """
        window.errors = []; window.dom = [];
        const fail = async () => { throw new Error('no session on the site'); };
        const a = createRtcAgent({ auth: { getToken: fail },
          on: { authError: (d) => window.errors.push(d.error) } });
        a.addEventListener('rtc-auth-refresh-failed', () => window.dom.push('failed'));
        document.body.append(a);
        a.setAttribute('open', '');"""))
    ipage.wait_for_function("window.errors.length > 0")
    assert ipage.evaluate("window.errors")[0] == "no session on the site"
    assert ipage.evaluate("window.dom") == ["failed"]
    expect(ipage.locator("rtc-agent .err")).to_contain_text("no session on the site")
