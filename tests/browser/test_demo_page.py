"""The demo page for a newcomer: the panel says what to do before login, never covers the page's
own text at 1280 px, and the page tells how to see an approval."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login, wait_connected

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_before_login_the_panel_says_to_sign_in(page: Any, web: Any) -> None:
    page.goto("/")
    page.click("rtc-agent .bubble")
    expect(page.locator("rtc-agent .signin")).to_have_text(
        "Not signed in yet: log in with the form on this page.")
    expect(page.locator("rtc-agent .conn")).to_have_text("signed out")
    expect(page.locator("rtc-agent rtc-composer")).to_be_hidden()
    assert page.errors == []


def test_the_open_panel_leaves_the_page_text_readable(page: Any, web: Any, worker: Any,
                                                      web_user: Any) -> None:
    login(page, web_user)  # logging in opens the panel
    expect(page.locator("rtc-agent .signin")).to_be_hidden()
    panel = page.locator("rtc-agent .panel").bounding_box()
    for selector in ("h1", "form#login", "ol.note"):
        box = page.locator(selector).bounding_box()
        assert box["x"] + box["width"] <= panel["x"], selector  # left of the panel
    assert "manual" in page.locator("ol.note").inner_text()
    assert page.errors == []


def test_the_page_keeps_the_rotated_refresh_token(page: Any, web: Any,
                                                  web_user: Any) -> None:
    """Refresh tokens are single use: each reload refreshes with the stored token and must keep
    the rotated one, or the next reload would present a used token and end the login."""
    from apps.accounts.models import RefreshTokenRecord, TokenFamily

    login(page, web_user)
    stored = [page.evaluate("sessionStorage.getItem('demo-refresh')")]
    for _ in range(2):
        page.reload()  # the access token is gone with the page: getToken refreshes
        wait_connected(page)
        stored.append(page.evaluate("sessionStorage.getItem('demo-refresh')"))
    assert len(set(stored)) == 3 and all(stored)
    family = TokenFamily.objects.get(user=web_user)
    assert family.revoked_at is None
    records = RefreshTokenRecord.objects.filter(family=family)
    assert (records.count(), records.filter(used_at__isnull=True).count()) == (3, 1)
    assert page.errors == []
