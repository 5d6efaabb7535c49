"""/metrics in this process: the token, the text format (parsed by prometheus_client's own
parser), the system gauges and the latency histograms."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from apps.ops import metrics, processes
from tests.sessions.factories import make_session, make_turn

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-metrics-token"


@pytest.fixture
def configured(settings: Any, llm: Any) -> Any:
    settings.RTC_METRICS_TOKEN = TOKEN
    settings.OPENAI_BASE_URL = llm.base_url  # the scripted model's /v1/models answers 200
    settings.OPENAI_API_KEY = "sk-test-key"
    return settings


def scrape(client: Client, token: str = TOKEN) -> dict[str, Any]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"].startswith("text/plain; version=")
    return {f.name: f for f in text_string_to_metric_families(response.content.decode())}


def samples(families: dict[str, Any], family: str, name: str | None = None,
            **labels: str) -> list[Any]:
    return [s for s in families[family].samples if (name is None or s.name == name)
            and all(s.labels.get(k) == v for k, v in labels.items())]


def test_no_token_configured_means_no_page(client: Client, settings: Any) -> None:
    settings.RTC_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", "Bearer", TOKEN,
                                    f"Bearer {TOKEN}x"])
def test_a_missing_or_wrong_token_is_refused(client: Client, configured: Any,
                                             header: str | None) -> None:
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    response = client.get("/metrics", **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"rtc_" not in response.content


def test_scrape_parses_with_gauges_of_the_system(client: Client, configured: Any,
                                                 make_user: Any) -> None:
    session = make_session(make_user())
    make_turn(session, status="running")
    make_turn(make_session(session.user), status="interrupted")
    make_turn(make_session(session.user), status="failed", error_message="network: Cut off")
    make_turn(make_session(session.user), status="failed", error_message="api: Bad key")
    processes.report("worker", "box:42", {"host": "box", "pid": 42, "started": 1.0,
                                          "session": str(session.id), "items_done": 5})
    families = scrape(client)
    for service in ("database", "redis", "objects", "llm"):
        (up,) = samples(families, "rtc_service_up", service=service)
        assert up.value == 1.0, service
        (took,) = samples(families, "rtc_service_probe_seconds", service=service)
        assert 0 <= took.value < 5
    assert samples(families, "rtc_workers")[0].value == 1.0
    assert samples(families, "rtc_worker_busy", process="box:42")[0].value == 1.0
    (done,) = samples(families, "rtc_worker_items_done", process="box:42")
    assert (done.name, done.value) == ("rtc_worker_items_done_total", 5.0)
    assert {s.labels["status"]: s.value for s in samples(families, "rtc_turns_open")} == {
        "pending": 0.0, "running": 1.0, "interrupted": 1.0}
    errors = {s.labels["category"]: s.value for s in samples(families,
                                                             "rtc_turn_errors_last_hour")}
    assert errors["network"] == 1.0 and errors["api"] == 1.0 and errors["context"] == 0.0
    assert samples(families, "rtc_queue_items")[0].value == 0.0


def test_request_latency_is_a_histogram_labelled_by_route_and_process(
    client: Client, configured: Any
) -> None:
    for _ in range(3):
        assert client.get("/healthz").status_code == 200
    families = scrape(client)
    me = processes.this_process()
    (count,) = samples(families, "rtc_http_request_duration_seconds",
                       "rtc_http_request_duration_seconds_count", route="healthz",
                       method="GET", status="2xx", process=me)
    assert count.value >= 3
    buckets = samples(families, "rtc_http_request_duration_seconds",
                      "rtc_http_request_duration_seconds_bucket", route="healthz", process=me)
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == count.value
    assert "rtc_rpc_duration_seconds" in families


def test_samples_of_other_web_processes_come_from_their_reports(client: Client,
                                                               configured: Any) -> None:
    fake = [{"name": "rtc_rpc_duration_seconds", "type": "histogram", "help": "RPCs.",
             "samples": [["rtc_rpc_duration_seconds_bucket", {"method": "v1.session.list",
                                                              "le": "+Inf"}, 4.0],
                         ["rtc_rpc_duration_seconds_count", {"method": "v1.session.list"}, 4.0],
                         ["rtc_rpc_duration_seconds_sum", {"method": "v1.session.list"}, 0.2]]}]
    processes.report("web", "other:7", {"host": "other", "pid": 7, "started": 1.0,
                                        "sockets": 12, "metrics": fake})
    families = scrape(client)
    (count,) = samples(families, "rtc_rpc_duration_seconds", "rtc_rpc_duration_seconds_count",
                       process="other:7")
    assert (count.labels["method"], count.value) == ("v1.session.list", 4.0)
    assert samples(families, "rtc_web_sockets", process="other:7")[0].value == 12.0


def test_rpc_methods_outside_the_registry_share_one_label() -> None:
    class Cmd:
        def __init__(self, method: object) -> None:
            self.params = {"method": method}

    assert metrics._rpc_method(Cmd("v1.session.list")) == "v1.session.list"
    assert metrics._rpc_method(Cmd("v1.anything.made-up")) == "unknown"
    assert metrics._rpc_method(Cmd(42)) == "unknown"


def test_redis_away_still_answers_the_probes(client: Client, configured: Any,
                                             monkeypatch: Any) -> None:
    configured.REDIS_URL = "redis://127.0.0.1:1/0"
    import rtcagent.redis

    monkeypatch.setattr(rtcagent.redis, "_sync", None)
    try:
        families = scrape(client)
    finally:
        monkeypatch.undo()
    assert samples(families, "rtc_service_up", service="redis")[0].value == 0.0
    assert samples(families, "rtc_service_up", service="database")[0].value == 1.0
    assert "rtc_workers" not in families
    assert "rtc_http_request_duration_seconds" in families  # this process's own samples
