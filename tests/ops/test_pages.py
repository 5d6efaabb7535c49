"""The console's own pages: usage (per user, per day, cost) and who may open them."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.ops.models import ModelPrice
from apps.turns.models import LLMCall
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
    """Calls as ``accounting.record_answer`` leaves them: priced when recorded (``cost_usd``)
    or not (no price row for that model then)."""
    heavy, light = make_user("heavy@example.com"), make_user("light@example.com")
    s1, s2 = make_session(heavy), make_session(light)
    now = timezone.now()

    def call(session: Any, turn: Any, days_ago: int, tokens: tuple[int, int, int],
             cost: str | None, model: str = "scripted-model") -> None:
        row = LLMCall.objects.create(
            turn=turn, session=session, step=LLMCall.objects.filter(turn=turn).count(),
            model=model, prompt_tokens=tokens[0], cached_tokens=tokens[1],
            completion_tokens=tokens[2], total_tokens=tokens[0] + tokens[2],
            cost_usd=Decimal(cost) if cost is not None else None)
        LLMCall.objects.filter(pk=row.pk).update(created_at=now - timedelta(days=days_ago))

    today, earlier = make_turn(s1, status="completed"), make_turn(s1, status="completed")
    call(s1, today, 0, (1000, 200, 300), "0.0040")
    call(s1, today, 0, (500, 0, 100), None, model="old-model")  # no price row then
    call(s1, earlier, 2, (3000, 1000, 500), "0.0086")
    light_turn = make_turn(s2, status="completed")
    call(s2, light_turn, 0, (10, 0, 5), "0.00006")
    call(s2, make_turn(s2, status="completed"), 40, (99999, 0, 99999), "9.9")  # outside
    return heavy, light


def test_usage_sums_the_calls_and_their_recorded_cost(staff: Client, make_user: Any,
                                                      settings: Any) -> None:
    settings.RTC_MODEL = "scripted-model"
    ModelPrice.objects.create(model="scripted-model", input_per_million="2.0",
                              cached_input_per_million="0.5", output_per_million="8.0")
    _, light = _usage_world(make_user)
    response = staff.get("/admin/usage/?days=30")
    rows = response.context["per_user"]
    assert [(r["email"], r["turns"], r["calls"], r["input"], r["cached"], r["output"])
            for r in rows] == [("heavy@example.com", 2, 3, 4500, 1200, 900),
                               ("light@example.com", 1, 1, 10, 0, 5)]
    # The recorded costs are summed (not re-priced with today's model); the unpriced call
    # adds tokens but no cost, and the page names its model.
    assert rows[0]["cost"] == Decimal("0.0126") and rows[0]["unpriced"] == 1
    assert response.context["unpriced"] == ["old-model"]
    page = response.content.decode()
    assert "0.0126" in page and "<svg" in page
    assert "/admin/ops/modelprice/add/?model=old-model" in page
    assert page.count('data-series="input"') == 30
    per_day = response.context["per_day"]
    assert [d["input"] for d in per_day[-3:]] == [3000, 0, 1510]
    assert response.context["total_cost"] == Decimal("0.01266")
    one = staff.get(f"/admin/usage/?days=7&user={light.pk}")
    assert one.context["totals"] == {"turns": 1, "calls": 1, "input": 10, "output": 5,
                                     "cached": 0}
    assert one.context["chosen_user"] == light and one.context["unpriced"] == []


def test_usage_without_any_price_leaves_cost_empty(staff: Client, make_user: Any,
                                                   settings: Any) -> None:
    settings.RTC_MODEL = "unpriced-model"
    user = make_user()
    session = make_session(user)
    LLMCall.objects.create(turn=make_turn(session, status="completed"), session=session,
                           step=0, model="unpriced-model", prompt_tokens=10,
                           completion_tokens=2, total_tokens=12)
    response = staff.get("/admin/usage/")
    assert [r["cost"] for r in response.context["per_user"]] == [None]
    assert response.context["total_cost"] is None
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


def test_calls_outside_turns_are_listed_with_their_purpose(make_user: Any) -> None:
    admin = Client()
    admin.force_login(make_user(is_staff=True, is_superuser=True))
    session = make_session(make_user())
    LLMCall.objects.create(turn=None, session=session, step=0, model="m", purpose="extraction",
                           prompt_tokens=7, completion_tokens=3, total_tokens=10)
    page = admin.get("/admin/turns/llmcall/?purpose__exact=extraction")
    assert page.status_code == 200
    assert page.context["cl"].result_count == 1
    assert "memory extraction" in page.content.decode()
