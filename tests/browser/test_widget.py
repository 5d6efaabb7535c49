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
