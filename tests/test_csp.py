"""Content-Security-Policy on every kind of page: scripts only from our origin or with the
response's nonce, never 'unsafe-inline' or 'unsafe-eval'; the script sandbox keeps its own."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db]


def _policy(response: Any) -> dict[str, list[str]]:
    header = response.headers.get("Content-Security-Policy")
    assert header, f"no CSP on {response.wsgi_request.path}"
    directives = {}
    for part in header.split(";"):
        name, *values = part.split()
        directives[name] = values
    return directives


def _assert_strict(response: Any) -> dict[str, list[str]]:
    policy = _policy(response)
    assert policy["default-src"] == ["'self'"]
    scripts = policy["script-src"]
    assert "'self'" in scripts
    assert not {"'unsafe-inline'", "'unsafe-eval'", "*", "data:", "blob:"} & set(scripts)
    assert all(s == "'self'" or s.startswith("'nonce-") for s in scripts), scripts
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'self'"]
    assert policy["base-uri"] == ["'self'"]
    assert policy["connect-src"] == ["'self'"]  # the widget's WebSocket: same host (CSP 3)
    return policy


def _inline_scripts_carry_the_nonce(response: Any, policy: dict[str, list[str]]) -> int:
    html = response.content.decode()
    inline = re.findall(r"<script(?![^>]*\bsrc=)([^>]*)>", html)
    nonces = [s.removeprefix("'nonce-").removesuffix("'") for s in policy["script-src"]
              if s.startswith("'nonce-")]
    for attrs in inline:
        if 'type="application/json"' in attrs:
            continue  # data, never run (json_script)
        assert nonces and f'nonce="{nonces[0]}"' in attrs, attrs
    return len(inline)


@pytest.fixture
def staff(make_user) -> Client:
    client = Client()
    client.force_login(make_user("ops@example.com", is_staff=True, is_superuser=True))
    return client


def test_demo_page(settings) -> None:
    settings.RTC_DEMO_PAGE = True
    page = Client().get("/")
    assert page.status_code == 200
    policy = _assert_strict(page)
    assert _inline_scripts_carry_the_nonce(page, policy) == 1
    assert policy["frame-src"] == ["'self'"]  # the script sandbox, served from static/


def test_admin_login_page() -> None:
    page = Client().get("/admin/login/")
    assert page.status_code == 200
    _assert_strict(page)


def test_admin_change_list_with_the_widget(staff) -> None:
    page = staff.get("/admin/agent_sessions/session/")
    assert page.status_code == 200
    policy = _assert_strict(page)
    assert "rtc-agent/rtc-agent.js" in page.content.decode()  # the floating widget
    assert _inline_scripts_carry_the_nonce(page, policy) == 1


def test_each_response_has_its_own_nonce(staff) -> None:
    first, second = (
        [s for s in _policy(staff.get("/admin/"))["script-src"] if s.startswith("'nonce-")]
        for _ in range(2)
    )
    assert len(first) == len(second) == 1 and first != second


@pytest.mark.parametrize("path", ["/api/schema/", "/api/auth/me/", "/healthz"])
def test_api_responses(path: str) -> None:
    reply = Client().get(path)
    assert reply.status_code in (200, 401)
    _assert_strict(reply)


def test_the_script_sandbox_page_keeps_its_own_policy() -> None:
    """The sandbox runs model-written code with eval in an opaque-origin frame; the pages'
    policy on it (a header combines with its meta policy) would stop the code."""
    reply = Client().get("/static/rtc-agent/sandbox.html")
    assert reply.status_code == 200
    assert "Content-Security-Policy" not in reply.headers
    html = b"".join(reply.streaming_content).decode()
    assert ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "script-src 'unsafe-inline' 'unsafe-eval' blob:; worker-src blob:; "
            "connect-src 'none'\">") in html
    assert "if (self.origin === 'null')" in html  # inert unless sandboxed
