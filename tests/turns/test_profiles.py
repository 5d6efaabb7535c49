"""Per-model profiles: the defaults, and the row an operator edits in the admin."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from apps.ops.models import ModelPrice
from apps.turns.profiles import ModelProfile, profile_for

pytestmark = pytest.mark.django_db

ADD = "/admin/ops/modelprice/add/"


@pytest.fixture
def staff(make_user: Any) -> Client:
    client = Client()
    client.force_login(make_user(is_staff=True, is_superuser=True))
    return client


def _form(**overrides: Any) -> dict[str, Any]:
    data = {
        "model": "big-model", "input_per_million": "3", "cached_input_per_million": "0.3",
        "cache_write_per_million": "3.75", "output_per_million": "15",
        "context_window": "200000", "max_output_tokens": "32000", "autocompact_buffer": "20000",
        "tool_result_budget": "8000", "keep_recent_tool_results": "3",
        "cache_cold_seconds": "3600",
    }
    data.update(overrides)
    return data


def test_a_model_without_a_row_gets_the_defaults() -> None:
    profile = profile_for("unknown-model")
    assert profile == ModelProfile(
        name="unknown-model", context_window=128_000, max_output_tokens=8_192,
        autocompact_buffer=13_000, tool_result_budget=10_000, keep_recent_tool_results=5,
        cache_cold_seconds=300,
    )
    assert profile.compression_threshold == 115_000


def test_no_model_means_the_configured_one(settings: Any) -> None:
    settings.RTC_MODEL = "configured-model"
    ModelPrice.objects.create(model="configured-model", input_per_million=1,
                              output_per_million=2, context_window=32_000)
    assert profile_for().name == "configured-model"
    assert profile_for().context_window == 32_000
    settings.RTC_MODEL = ""
    assert profile_for().name == "gpt-4.1-mini"


def test_the_row_saved_in_the_admin_is_the_models_profile(staff: Client) -> None:
    page = staff.get(ADD + "?model=big-model")
    assert page.status_code == 200
    assert 'value="big-model"' in page.content.decode()

    response = staff.post(ADD, _form())
    assert response.status_code == 302, response.content.decode()[:2000]

    assert profile_for("big-model") == ModelProfile(
        name="big-model", context_window=200_000, max_output_tokens=32_000,
        autocompact_buffer=20_000, tool_result_budget=8_000, keep_recent_tool_results=3,
        cache_cold_seconds=3600,
    )
    assert profile_for("big-model").compression_threshold == 180_000
    assert profile_for("other-model") == ModelProfile(name="other-model")

    row = ModelPrice.objects.get(model="big-model")
    change = f"/admin/ops/modelprice/{row.pk}/change/"
    assert "180,000 tokens" in staff.get(change).content.decode()
    staff.post(change, _form(context_window="100000"))
    assert profile_for("big-model").context_window == 100_000  # the next call sees the edit


def test_a_row_created_for_prices_only_keeps_the_default_window(staff: Client) -> None:
    response = staff.post(ADD, {"model": "cheap", "input_per_million": "0.1",
                                "output_per_million": "0.4", "context_window": "128000",
                                "max_output_tokens": "8192", "autocompact_buffer": "13000",
                                "tool_result_budget": "10000", "keep_recent_tool_results": "5",
                                "cache_cold_seconds": "300"})
    assert response.status_code == 302
    assert profile_for("cheap") == ModelProfile(name="cheap")


@pytest.mark.parametrize(("field", "value", "error"), [
    ("autocompact_buffer", "200000", "The auto-compact buffer must be below the window."),
    ("max_output_tokens", "300000", "The max output must be above 0 and below the window."),
    ("tool_result_budget", "0", "The tool result budget must be above 0."),
    ("output_per_million", "-1", "Prices cannot be negative."),
    ("context_window", "-5", "Ensure this value is greater than or equal to 0."),
])
def test_the_admin_refuses_settings_that_cannot_work(staff: Client, field: str, value: str,
                                                     error: str) -> None:
    response = staff.post(ADD, _form(**{field: value}))
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not ModelPrice.objects.exists()
    assert profile_for("big-model") == ModelProfile(name="big-model")


def test_cost_prices_cached_reads_and_cache_writes_apart() -> None:
    row = ModelPrice(model="m", input_per_million=Decimal("3"),
                     cached_input_per_million=Decimal("0.3"),
                     cache_write_per_million=Decimal("3.75"), output_per_million=Decimal("15"))
    # 10000 prompt = 6000 fresh + 3000 cached + 1000 written; 500 out (reasoning included)
    cost = row.cost(input_tokens=10_000, cached_tokens=3_000, cache_write_tokens=1_000,
                    output_tokens=500)
    assert cost == Decimal("0.03015")  # (6000*3 + 3000*0.3 + 1000*3.75 + 500*15) / 1e6
    row.cached_input_per_million = row.cache_write_per_million = None  # empty: the input price
    assert row.cost(input_tokens=10_000, cached_tokens=3_000, cache_write_tokens=1_000,
                    output_tokens=500) == Decimal("0.0375")  # (10000*3 + 500*15) / 1e6
    # the usage page's call, without cache writes, is priced as before
    assert row.cost(input_tokens=10_000, cached_tokens=3_000, output_tokens=500) == (
        Decimal("0.0375"))
