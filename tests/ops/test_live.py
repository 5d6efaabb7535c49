"""The console against a real stack: Daphne (the web process), worker processes, the scripted
model and the official centrifuge-python client as the browser. The system page and /metrics
are read from Daphne over HTTP with a staff session cookie and the metrics token."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from apps.ops import processes
from tests.livesrv import LiveServer, start_daphne
from tests.turns.stack import Browser, Workers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TOKEN = "live-metrics-token"


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any, llm: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_daphne(tmp_path_factory.mktemp("web"), RTC_METRICS_TOKEN=TOKEN,
                          OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="sk-test-key",
                          RTC_PING_INTERVAL="2", RTC_PONG_TIMEOUT="1")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def worker(web: LiveServer, llm: Any,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    workers = Workers(tmp_path_factory.mktemp("worker"), llm.base_url)
    workers.start(1)
    yield workers
    workers.stop()


@pytest.fixture
def staff(make_user: Any) -> Client:
    client = Client()
    client.force_login(make_user(is_staff=True, is_superuser=True))
    return client


def daphne_id(server: LiveServer) -> str:
    return f"{processes.this_process().rsplit(':', 1)[0]}:{server.proc.pid}"


def get(server: LiveServer, path: str, *, cookie: str = "", token: str = "") -> tuple[int, str]:
    headers = {"Cookie": f"sessionid={cookie}"} if cookie else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(server.http_url + path, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def eventually(probe: Callable[[], Any], within: float = 15.0) -> Any:
    """Run ``probe`` in a thread until it returns something truthy."""
    deadline = time.monotonic() + within
    while True:
        value = await asyncio.to_thread(probe)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {probe}")
        await asyncio.sleep(0.2)


def worker_report(pid: int) -> dict[str, Any] | None:
    return next((w for w in processes.live("worker") if w["pid"] == pid), None)


def scrape(server: LiveServer) -> dict[str, Any]:
    status, body = get(server, "/metrics", token=TOKEN)
    assert status == 200, body[:300]
    return {f.name: f for f in text_string_to_metric_families(body)}


def value(families: dict[str, Any], family: str, name: str | None = None,
          **labels: str) -> float | None:
    found = [s.value for s in families.get(family, type("F", (), {"samples": []})).samples
             if (name is None or s.name == name)
             and all(s.labels.get(k) == v for k, v in labels.items())]
    return found[0] if found else None


async def test_system_page_shows_the_busy_worker_and_the_console_stops_its_turn(
    web: LiveServer, worker: Workers, model: Any, make_user: Any, staff: Client
) -> None:
    model.add_rule({"last_user_contains": "slowly"},
                   {"content": "word " * 100, "chunk_size": 5, "chunk_delay": 0.1})
    (proc,) = worker.procs
    await eventually(lambda: worker_report(proc.pid))
    user = await sync_to_async(make_user)()
    cookie = staff.cookies["sessionid"].value
    async with Browser(web, user) as tab:
        sid = (await tab.send("answer slowly please"))["result"]["session_id"]
        turn = await tab.turn_status(sid, "running")
        report = await eventually(lambda: (worker_report(proc.pid) or {}).get("session") == sid
                                  and worker_report(proc.pid))
        assert report["host"] and report["started"] <= time.time()
        me = daphne_id(web)
        await eventually(lambda: any(w["id"] == me and w["sockets"] == 1
                                     for w in processes.live("web")))
        status, page = await asyncio.to_thread(get, web, "/admin/system/", cookie=cookie)
        assert status == 200
        assert f'<tr data-process="{processes.this_process().split(":")[0]}:{proc.pid}">' in page
        assert f'href="/admin/agent_sessions/session/{sid}/change/"' in page
        assert '<td data-k="running">1</td>' in page
        assert f'<tr data-process="{me}">' in page
        for service in ("database", "redis", "objects", "llm"):
            assert f'<tr data-check="{service}"><td>{service}</td>\n        <td class="ok">' in page

        response = await sync_to_async(staff.post)(
            "/admin/turns/turn/", {"action": "stop_turns", "_selected_action": [turn["id"]]})
        assert response.status_code == 302
        stopped = await tab.turn_status(sid, "cancelled", within=10)
        assert stopped["id"] == turn["id"]
    text = "".join(m["content"]["data"] for m in tab.messages(sid, "markdown"))
    assert 0 < len(text) < len("word " * 100)  # cut short, the partial text kept
    done = await eventually(lambda: (worker_report(proc.pid) or {}).get("items_done", 0) >= 1
                            and worker_report(proc.pid))
    assert done["session"] is None


async def test_a_failed_turn_is_counted_and_explained(
    web: LiveServer, worker: Workers, model: Any, make_user: Any, staff: Client
) -> None:
    model.add_rule({"last_user_contains": "too long"}, {"error": {
        "status": 400, "message": "maximum context length exceeded",
        "code": "context_length_exceeded"}})
    user = await sync_to_async(make_user)()
    async with Browser(web, user) as tab:
        sid = (await tab.send("this is far too long"))["result"]["session_id"]
        failed = await tab.turn_status(sid, "failed")
    assert failed["error_message"].startswith("context: ")
    families = await asyncio.to_thread(scrape, web)
    assert value(families, "rtc_turn_errors_last_hour", category="context") == 1.0
    cookie = staff.cookies["sessionid"].value
    _, page = await asyncio.to_thread(get, web, "/admin/system/", cookie=cookie)
    assert '<tr data-category="context"><td><a href=' in page
    detail = await sync_to_async(staff.get)(f"/admin/turns/turn/{failed['id']}/change/")
    html = detail.content.decode()
    title = failed["error_message"].split(": ", 1)[1]
    assert title in html and "this is far too long" in html and "not retryable" in html


async def test_force_disconnect_closes_the_users_sockets_with_3503(
    web: LiveServer, make_user: Any, staff: Client
) -> None:
    user = await sync_to_async(make_user)()
    other = await sync_to_async(make_user)()
    async with Browser(web, user) as tab, Browser(web, other) as bystander:
        response = await sync_to_async(staff.post)(
            "/admin/accounts/user/", {"action": "force_disconnect", "_selected_action": [user.pk]})
        assert response.status_code == 302
        await tab.rec.wait_for(lambda: tab.rec.of("disconnected"), within=10)
        (ctx,) = tab.rec.of("disconnected")
        assert ctx.code == 3503
        await asyncio.sleep(0.5)
        assert bystander.rec.of("disconnected") == []
        assert (await bystander.rpc("v1.session.list", {}))["items"] == []


async def test_metrics_of_the_web_process_over_http(
    web: LiveServer, worker: Workers, make_user: Any
) -> None:
    await eventually(lambda: worker_report(worker.procs[0].pid))
    assert (await asyncio.to_thread(get, web, "/metrics"))[0] == 401
    assert (await asyncio.to_thread(get, web, "/metrics", token="nope"))[0] == 401
    user = await sync_to_async(make_user)()
    me = daphne_id(web)
    async with Browser(web, user) as tab:
        for _ in range(3):
            await tab.rpc("v1.session.list", {})
        await asyncio.to_thread(get, web, "/readyz")

        def one_socket() -> Any:
            """The scrape once the gauge counts this socket alone: a socket of an earlier
            test of the module may still be on its way out of the same server."""
            found = scrape(web)
            return found if value(found, "rtc_web_sockets", process=me) == 1.0 else None

        families = await eventually(one_socket)
    rpcs = value(families, "rtc_rpc_duration_seconds", "rtc_rpc_duration_seconds_count",
                 method="v1.session.list", process=me)
    assert rpcs is not None and rpcs >= 3
    assert value(families, "rtc_http_request_duration_seconds",
                 "rtc_http_request_duration_seconds_count", route="readyz", process=me) >= 1
    assert value(families, "rtc_workers") >= 1
    assert value(families, "rtc_service_up", service="llm") == 1.0
    assert value(families, "rtc_queue_items") == 0.0


async def test_heartbeats_appear_and_expire(web: LiveServer, llm: Any, tmp_path: Any) -> None:
    workers = Workers(tmp_path, llm.base_url)
    workers.start(2)
    try:
        first, second = workers.procs
        await eventually(lambda: worker_report(first.pid) and worker_report(second.pid))
        workers.kill(0)  # SIGKILL: no goodbye, the report expires
        killed_at = time.monotonic()
        await eventually(lambda: worker_report(first.pid) is None, within=processes.TTL + 5)
        assert time.monotonic() - killed_at > 2  # it was there until its TTL ran out
        assert worker_report(second.pid) is not None
        second.terminate()  # a clean stop withdraws at once
        second.wait(10)
        assert worker_report(second.pid) is None
    finally:
        workers.kill()
