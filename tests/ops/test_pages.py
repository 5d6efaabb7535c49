"""The console's own pages: usage (per user, per day, cost) and who may open them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.ops.models import ModelPrice
from apps.turns.models import Turn
from tests.sessions.factories import make_session, make_turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(make_user: Any) -> Client:
    client = Client()
    client.force_login(make_user(is_staff=True))
    return client


@pytest.mark.parametrize("path", ["/admin/system/", "/admin/usage/"])
def test_pages_refuse_anonymous_and_non_staff(client: Client, make_user: Any,
                                              path: str) -> None:
    customer = Client()
    customer.force_login(make_user())
    for who in (client, customer):
        response = who.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


# --- usage ----------------------------------------------------------------------------------

def _usage_world(make_user: Any) -> tuple[Any, Any]:
    heavy, light = make_user("heavy@example.com"), make_user("light@example.com")
    s1, s2 = make_session(heavy), make_session(light)
    now = timezone.now()
    for days_ago, tokens in ((0, (1000, 200, 300)), (2, (3000, 1000, 500))):
        t = make_turn(s1, status="completed", input_tokens=tokens[0], cached_tokens=tokens[1],
                      output_tokens=tokens[2])
        Turn.objects.filter(pk=t.pk).update(created_at=now - timedelta(days=days_ago))
    make_turn(s2, status="completed", input_tokens=10, cached_tokens=0, output_tokens=5)
    old = make_turn(s2, status="completed", input_tokens=99999, output_tokens=99999)
    Turn.objects.filter(pk=old.pk).update(created_at=now - timedelta(days=40))
    return heavy, light


def test_usage_per_user_with_cost_and_a_chart(staff: Client, make_user: Any,
                                              settings: Any) -> None:
    settings.RTC_MODEL = "scripted-model"
    ModelPrice.objects.create(model="scripted-model", input_per_million="2.0",
                              cached_input_per_million="0.5", output_per_million="8.0")
    _, light = _usage_world(make_user)
    response = staff.get("/admin/usage/?days=30")
    rows = response.context["per_user"]
    assert [(r["email"], r["turns"], r["input"], r["cached"], r["output"]) for r in rows] == [
        ("heavy@example.com", 2, 4000, 1200, 800), ("light@example.com", 1, 10, 0, 5)]
    # (4000-1200)*2 + 1200*0.5 + 800*8 = 5600 + 600 + 6400 = 12600 per million
    assert str(rows[0]["cost"]) == "0.0126"
    page = response.content.decode()
    assert "0.0126" in page and "<svg" in page
    assert page.count('data-series="input"') == 30
    per_day = response.context["per_day"]
    assert [d["input"] for d in per_day[-3:]] == [3000, 0, 1010]
    one = staff.get(f"/admin/usage/?days=7&user={light.pk}")
    assert one.context["totals"] == {"turns": 1, "input": 10, "output": 5, "cached": 0}
    assert one.context["chosen_user"] == light


def test_usage_without_a_price_leaves_cost_empty(staff: Client, make_user: Any,
                                                 settings: Any) -> None:
    settings.RTC_MODEL = "unpriced-model"
    _usage_world(make_user)
    response = staff.get("/admin/usage/")
    assert [r["cost"] for r in response.context["per_user"]] == [None, None]
    page = response.content.decode()
    assert "No price is configured for the current model" in page
    assert "/admin/ops/modelprice/add/?model=unpriced-model" in page


def test_system_page_lists_reports_queue_turns_and_errors(staff: Client, make_user: Any,
                                                          settings: Any, llm: Any) -> None:
    from apps.ops import processes
    from apps.turns import queue

    settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY = llm.base_url, "sk-test-key"
    session = make_session(make_user())
    make_turn(session, status="interrupted")
    make_turn(make_session(session.user), status="failed", error_message="timeout: Too slow")
    queue.enqueue_message(str(session.id), "m1", user_id=session.user_id)
    processes.report("worker", "box:9", {"host": "box", "pid": 9, "started": 1.0,
                                         "session": str(session.id), "items_done": 4})
    response = staff.get("/admin/system/")
    assert response.status_code == 200
    state = response.context["state"]
    assert [w["id"] for w in state["workers"]] == ["box:9"]
    assert state["queue"] == {"ready": 1, "held": 0, "items": 1, "truncated": 0}
    assert state["turns"] == {"pending": 0, "running": 0, "interrupted": 1}
    assert state["errors_last_hour"]["timeout"] == 1
    assert [(c["name"], c["ok"]) for c in response.context["checks"]] == [
        ("database", True), ("redis", True), ("objects", True), ("llm", True)]
    page = response.content.decode()
    assert f'href="/admin/agent_sessions/session/{session.id}/change/"' in page
    assert "<td>4</td>" in page
