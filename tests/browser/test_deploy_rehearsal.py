"""Deploy rehearsal in a browser: the widget of a clean clone built like a buildpack build,
served from its collected files by the Procfile's ``web`` with ``DJANGO_DEBUG=False``, connects
and shows an answer that the Procfile's ``worker`` got from the scripted model.

The build, the database and the processes are tests/test_deploy_rehearsal.py's. In production
the demo page is off, so the widget is reached as an operator reaches it: ``createsuperuser``
(as docs/deploy.md says), then the widget floating over the Django admin.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import send, wait_connected
from tests.livesrv import free_port
from tests.test_deploy_rehearsal import (
    VENDORED,
    Processes,
    clone_and_build,
    fresh_database,
    manifest,
    procfile,
    run,
    runtime_env,
)

pytestmark = pytest.mark.slow

ADMIN = "deploy-admin@example.com"


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, llm: Any) -> Iterator[dict[str, Any]]:
    """Built, released, an admin created, web and worker running; yields what the test needs."""
    tmp = tmp_path_factory.mktemp("deploy")
    app = clone_and_build(tmp)
    port = free_port()
    password = secrets.token_urlsafe(16)
    processes = Processes(app, tmp)
    with fresh_database(tmp) as database_url:
        env = runtime_env(database_url, port, OPENAI_API_KEY=llm.api_key,
                          OPENAI_BASE_URL=llm.base_url, RTC_MODEL="scripted-model")
        run(procfile(app)["release"], app, env)
        run("python manage.py createsuperuser --noinput", app,
            {**env, "DJANGO_SUPERUSER_EMAIL": ADMIN, "DJANGO_SUPERUSER_PASSWORD": password})
        try:
            processes.start("web", env)
            processes.start("worker", env)
            processes.wait_listening("web", port)
            yield {"app": app, "url": f"http://127.0.0.1:{port}", "password": password,
                   "processes": processes}
        finally:
            processes.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def test_the_deployed_widget_connects_and_shows_the_model_answer(
    deployed: dict[str, Any], chromium: Any, model: Any
) -> None:
    model.add_rule({"last_user_contains": "deployed"},
                   {"content": "Hello from the **deployed** build.", "chunk_size": 5})
    static: dict[str, int] = {}

    def record(res: Any) -> None:
        if "/static/" in res.url:
            static[res.url.split("/static/", 1)[1]] = res.status

    ctx = chromium.new_context(base_url=deployed["url"], viewport={"width": 1280, "height": 800})
    try:
        page = ctx.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("response", record)
        page.goto("/admin/login/")
        page.fill("input[name=username]", ADMIN)
        page.fill("input[name=password]", deployed["password"])
        page.click("input[type=submit]")
        expect(page.locator("rtc-agent")).to_have_count(1, timeout=15000)
        page.click("rtc-agent .bubble")
        wait_connected(page)
        send(page, "hello, deployed agent")
        answer = page.locator("rtc-message-list .md").last
        expect(answer).to_have_text("Hello from the deployed build.", timeout=20000)
        expect(answer.locator("strong")).to_have_text("deployed")
        assert errors == []
    finally:
        ctx.close()
    # The widget came from the build's collected files: hashed entry point, vendored libraries.
    paths = manifest(deployed["app"])
    assert static[paths["rtc-agent/rtc-agent.js"]] == 200
    for name in VENDORED:
        assert static[name] == 200, (name, deployed["processes"].output("web"))
    assert Path(deployed["app"], "staticfiles", "rtc-agent", "vendor", "centrifuge.mjs").is_file()
