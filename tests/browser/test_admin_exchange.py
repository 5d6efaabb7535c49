"""The admin's floating widget gets its token by RFC 8693 exchange: the Django session gives a
short admin token (``/api/widget/staff-token``), ``/oauth2/token`` turns it into the staff user's
own access token; both stay in memory (never ``localStorage``) and are exchanged again before
the access token expires."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import send, wait_connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_admin_widget_chats_with_an_exchanged_token(page: Any, web: Any, worker: Any,
                                                    model: Any, web_user: Any,
                                                    django_db_blocker: Any) -> None:
    with django_db_blocker.unblock():
        type(web_user).objects.filter(pk=web_user.pk).update(is_staff=True)
    model.add_rule({"last_user_contains": "hello"}, {"content": "Hello from the **admin**."})
    calls: list[tuple[str, dict[str, Any]]] = []

    def record(response: Any) -> None:
        path = response.url.split("//", 1)[1].split("/", 1)[1]
        if path in ("api/widget/staff-token", "oauth2/token"):
            calls.append((path, response.json()))

    page.on("response", record)
    page.clock.install()
    page.goto("/admin/login/")
    page.fill("input[name=username]", web_user.email)
    page.fill("input[name=password]", f"pw-{web_user.email}")
    page.click("input[type=submit]")
    expect(page.locator("rtc-agent")).to_have_count(1, timeout=15000)
    page.click("rtc-agent .bubble")
    wait_connected(page)
    send(page, "hello there")
    expect(page.locator("rtc-message-list .md").last).to_contain_text("Hello from the admin",
                                                                      timeout=20000)

    assert [path for path, _ in calls][:2] == ["api/widget/staff-token", "oauth2/token"]
    admin, user = calls[0][1], calls[1][1]
    device = page.evaluate("localStorage.getItem('rtc-agent:device')")
    admin_claims, user_claims = _claims(admin["admin_token"]), _claims(user["access_token"])
    assert admin_claims["aud"] == "rtcagent:admin"
    assert admin_claims["token_type"] == "admin"
    assert admin_claims["exp"] - admin_claims["iat"] == 120
    assert (user_claims["sub"], user_claims["device_id"]) == (str(web_user.pk), device)
    assert user_claims["aud"] == "rtcagent"
    assert user["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    # Nothing of either token is kept in web storage.
    stored = page.evaluate("JSON.stringify([Object.entries(localStorage),"
                           " Object.entries(sessionStorage)])")
    assert "eyJ" not in stored
    assert admin["admin_token"] not in stored and user["access_token"] not in stored

    # A second call within the token's life reuses it; near its expiry it is exchanged again.
    get_token = f"document.querySelector('rtc-agent').getToken({{deviceId: {json.dumps(device)}}})"
    before = len(calls)
    assert page.evaluate(get_token) == user["access_token"]
    assert len(calls) == before
    page.clock.fast_forward("14:30")
    renewed = page.evaluate(get_token)
    deadline = time.monotonic() + 10
    while len(calls) < before + 2 and time.monotonic() < deadline:
        page.evaluate("1")  # let Playwright deliver the response events
        time.sleep(0.05)
    assert renewed != user["access_token"]
    assert [path for path, _ in calls[before:before + 2]] == ["api/widget/staff-token",
                                                              "oauth2/token"]
    assert _claims(renewed)["sub"] == str(web_user.pk)
    assert page.errors == []
