"""Browser tests of the <rtc-agent> widget: Debian's chromium driven by Playwright (sync API)
against a live stack: Daphne, one worker, the scripted model. Never `playwright install`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rtcagent.devtools.scripted_llm import ScriptedLLM
from tests.livesrv import LiveServer, start_daphne
from tests.turns.stack import Workers

# Playwright's sync API runs an event loop in this thread; the ORM must still be usable.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = os.environ.get("RTC_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VENDOR = Path(__file__).resolve().parents[2] / "static" / "rtc-agent" / "vendor" / "centrifuge.mjs"

if not Path(CHROMIUM).exists():
    pytest.skip(f"no chromium at {CHROMIUM}", allow_module_level=True)
if not VENDOR.exists():
    pytest.skip("widget libraries not vendored: run `make vendor`", allow_module_level=True)


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_daphne(tmp_path_factory.mktemp("web"), DJANGO_DEBUG="true",
                          RTC_MODEL="scripted-model")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def worker(web: LiveServer, llm: ScriptedLLM,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    workers = Workers(tmp_path_factory.mktemp("worker"), llm.base_url)
    workers.start(1)
    yield workers
    workers.stop()


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    pw = sync_api.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    browser.close()
    pw.stop()


@pytest.fixture
def context(chromium: Any, web: LiveServer) -> Iterator[Any]:
    ctx = chromium.new_context(base_url=web.http_url, viewport={"width": 1280, "height": 800})
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=web.http_url)
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: Any) -> Iterator[Any]:
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    page.on("dialog", lambda d: d.dismiss())
    yield page


@pytest.fixture
def web_user(make_user: Any, django_db_blocker: Any) -> Any:
    """A user whose password the server can check: the test settings hash with MD5, which the
    server process does not accept, so the hash is made with the default PBKDF2 hasher."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    user = make_user()
    hasher = PBKDF2PasswordHasher()
    user.password = hasher.encode(f"pw-{user.email}", hasher.salt())
    with django_db_blocker.unblock():
        get_user_model().objects.filter(pk=user.pk).update(password=user.password)
    return user


def login(page: Any, user: Any, *, mode: str | None = None) -> None:
    """Open the demo page, log in with email and password and wait for "connected"."""
    page.goto("/")
    page.fill("input[name=email]", user.email)
    page.fill("input[name=password]", f"pw-{user.email}")
    page.click("#login button")
    wait_connected(page)
    if mode:
        page.select_option("rtc-agent select[name=mode]", mode)


def wait_connected(page: Any) -> None:
    sync_api.expect(page.locator("rtc-agent .conn")).to_have_text("connected", timeout=15000)


def send(page: Any, text: str) -> None:
    page.fill("rtc-composer textarea", text)
    page.click("rtc-composer [data-act=send]")


def artifacts_dir() -> Path:
    """Where screenshots for debugging go: ``RTC_TEST_ARTIFACTS`` if set, else the test run's own
    folder (removed with it), so a test run leaves nothing in the checkout's ``var/``."""
    from django.conf import settings

    out = Path(os.environ.get("RTC_TEST_ARTIFACTS") or settings.VAR_DIR / "browser-tests")
    out.mkdir(parents=True, exist_ok=True)
    return out


def keep_artifacts(page: Any, name: str) -> None:
    """Screenshot for debugging a failure (never into docs): see ``artifacts_dir``."""
    out = artifacts_dir()
    page.screenshot(path=str(out / f"{name}.png"))


__all__ = ["artifacts_dir", "keep_artifacts", "login", "send", "shutil", "wait_connected"]
