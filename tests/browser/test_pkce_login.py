"""A static host page on another origin logs its visitor in with the PKCE helper
(static/rtc-agent/lib/pkce.js): redirect to /oauth2/authorize, the local login form, back with a
code, the token exchange over CORS, then the widget connects and chats (docs/auth.md, "The PKCE
flow for a static site")."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import send, wait_connected
from tests.livesrv import LiveServer, free_port, start_daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HOST_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>host</title>
<script type="module" src="{server}/static/rtc-agent/rtc-agent.js"></script></head>
<body>
<rtc-agent id="agent" server="{server}" open></rtc-agent>
<script type="module">
  import {{ pkceTokenSource }} from '{server}/static/rtc-agent/lib/pkce.js';
  const auth = pkceTokenSource({{
    server: '{server}', clientId: '{client_id}',
    redirectUri: location.origin + location.pathname,
  }});
  window.__auth = auth;
  try {{ await auth.handleRedirect(); }} catch (err) {{ window.__loginError = err.code; }}
  document.getElementById('agent').getToken = auth.getToken;
</script>
</body></html>
"""


@pytest.fixture(scope="module")
def host() -> Iterator[dict[str, Any]]:
    """A static HTTP server on another port: the host page, whose HTML is set by the test."""
    state: dict[str, Any] = {"html": ""}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = state["html"].encode()
            self.send_response(200 if self.path.startswith("/app/") else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["origin"] = f"http://127.0.0.1:{port}"
    state["url"] = state["origin"] + "/app/"
    yield state
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any, host: dict[str, Any],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_daphne(tmp_path_factory.mktemp("web-pkce"), DJANGO_DEBUG="true",
                          RTC_MODEL="scripted-model", RTC_ALLOWED_ORIGINS=host["origin"])
    yield server
    server.stop()


def _client(host: dict[str, Any]) -> str:
    from django.core.management import call_command

    out = StringIO()
    call_command("oauth_client", "create", "--name", "static site", "--public",
                 "--redirect-uri", host["url"], "--grant", "authorization-code", stdout=out)
    return str(json.loads(out.getvalue())["client_id"])


def test_a_static_page_on_another_origin_logs_in_with_pkce_and_chats(
    page: Any, web: LiveServer, worker: Any, model: Any, web_user: Any, host: dict[str, Any]
) -> None:
    client_id = _client(host)
    host["html"] = HOST_PAGE.format(server=web.http_url, client_id=client_id)
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    model.add_rule({"last_user_contains": "hello"}, {"content": "Hello from the static site."})

    page.goto(host["url"])
    page.wait_for_url(f"{web.http_url}/oauth2/authorize?**", timeout=15000)
    page.fill("#id_username", web_user.email)
    page.fill("#id_password", f"pw-{web_user.email}")
    page.click("#login")
    try:
        page.wait_for_url(f"{host['url']}**", timeout=15000)
    except Exception:
        raise AssertionError((page.url, page.content()[-1500:], console)) from None
    wait_connected(page)
    assert page.url == host["url"], "code and state are removed from the address bar"
    assert page.evaluate("window.__loginError") is None

    send(page, "hello there")
    expect(page.locator("rtc-message-list .md").last).to_have_text(
        "Hello from the static site.", timeout=30000)

    access = page.evaluate("window.__auth.getToken()")
    stored = page.evaluate("""() => ({
        local: Object.fromEntries(Object.keys(localStorage).map(k => [k, localStorage.getItem(k)])),
        session: Object.fromEntries(Object.keys(sessionStorage).map(
          k => [k, sessionStorage.getItem(k)])) })""")
    refresh = stored["session"].get(f"rtc-pkce:{client_id}:refresh")
    assert refresh and access and refresh != access
    local = json.dumps(stored["local"])
    assert access not in local and refresh not in local
    assert "eyJ" not in local  # no JWT of any kind
    assert [k for k, v in stored["session"].items() if v == refresh] == [
        f"rtc-pkce:{client_id}:refresh"]
    assert access not in json.dumps(stored["session"]), "the access token lives in memory only"
    assert f"rtc-pkce:{client_id}:pending" not in stored["session"]

    # A reload has no access token in memory: the refresh token (CORS again) gets a new pair.
    key = f"rtc-pkce:{client_id}:refresh"
    page.reload()
    wait_connected(page)
    rotated = page.evaluate(f"sessionStorage.getItem('{key}')")
    assert rotated and rotated != refresh, "refresh tokens are single use and rotated"
    assert page.url == host["url"]

    # Logout forgets the refresh token and revokes the login on the server (CORS).
    from apps.accounts.models import TokenFamily

    page.evaluate("window.__auth.logout()")
    assert page.evaluate(f"sessionStorage.getItem('{key}')") is None
    families = TokenFamily.objects.filter(user=web_user)
    assert families.count() == 1 and families.get().revoked_at is not None
    assert page.errors == [], console
