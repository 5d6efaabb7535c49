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
    server process does not accept, so the hash is made with the default PBKDF2 hasher. With
    few rounds: the default work factor costs a third of a second here for every user, and the
    server verifies the hash with the rounds it names (then re-hashes it at the default work
    factor at the first login, as it does any hash of an older one)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    user = make_user()
    hasher = PBKDF2PasswordHasher()
    user.password = hasher.encode(f"pw-{user.email}", hasher.salt(), iterations=1000)
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


__all__ = ["artifacts_dir", "expose_tokens", "integration_html", "keep_artifacts", "login", "send",
           "serve_page", "shutil", "wait_connected"]


# --- pages of an integrator (tests/browser/test_integration_*.py) ------------------------------

INTEGRATION_PATH = "/__integration__/page.html"
# A page Playwright answers has no address of its own: chromium's Local Network Access checks
# then refuse its WebSocket to 127.0.0.1. Integrator pages get a browser without that check.
INTEGRATION_ARGS = [*CHROMIUM_ARGS, "--disable-features=LocalNetworkAccessChecks"]


@pytest.fixture(scope="session")
def integration_chromium(chromium: Any) -> Iterator[Any]:
    """A second chromium from the same Playwright (one sync Playwright per process)."""
    browser = chromium.browser_type.launch(executable_path=CHROMIUM, args=INTEGRATION_ARGS)
    yield browser
    browser.close()


@pytest.fixture
def ipage(integration_chromium: Any, web: LiveServer) -> Iterator[Any]:
    """A page of an integrator's site (see ``serve_page``), 1280 x 800; ``ipage.errors`` are the
    page's uncaught errors."""
    ctx = integration_chromium.new_context(base_url=web.http_url,
                                           viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda exc: page.errors.append(str(exc)))
    yield page
    ctx.close()


def integration_html(script: str, *, body: str = "", head: str = "", lang: str = "en") -> str:
    """A plain page of a site that embeds the widget: ``script`` is a module script (it may
    ``import { createRtcAgent } from '/static/rtc-agent/rtc-agent.js'``)."""
    return (f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>Integration page</title>{head}</head><body><main><h1>Shop</h1>{body}</main>'
            f'<script type="module">{script}</script></body></html>')


def serve_page(page: Any, html: str, path: str = INTEGRATION_PATH) -> None:
    """Open ``html`` at ``path`` on the live server's origin (Playwright answers that one
    request, so the page shares the widget's origin, API and storage) and wait for its load."""
    page.route(f"**{path}", lambda route: route.fulfill(
        status=200, content_type="text/html; charset=utf-8", body=html))
    page.goto(path)


def expose_tokens(page: Any, user: Any) -> list[int]:
    """``window.rtcTestToken(seconds=900)`` in the page: a fresh access token of ``user`` living
    ``seconds``, signed by the server's key. Returns the list of lifetimes asked for (one entry
    per call), for tests that count token requests."""
    from datetime import timedelta

    from apps.accounts.tokens import issue_access_token

    calls: list[int] = []

    def mint(seconds: int = 900) -> str:
        calls.append(int(seconds))
        return issue_access_token(user, lifetime=timedelta(seconds=int(seconds)))

    page.expose_function("rtcTestToken", mint)
    return calls
