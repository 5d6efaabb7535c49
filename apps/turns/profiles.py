"""Per-model context settings: the window, the compaction threshold and the tool-result budgets.

The operator sets them per model in the admin (Operations > Model settings and prices, the
``apps.ops.models.ModelPrice`` row of that model name); a model without a row gets the defaults
below. Rows are read on every call (one indexed query), so an edit applies to the next LLM call.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings


@dataclass(frozen=True)
class ModelProfile:
    name: str
    context_window: int = 128_000
    max_output_tokens: int = 8_192
    autocompact_buffer: int = 13_000  # auto compact starts this far below the window
    tool_result_budget: int = 10_000  # tokens of one tool output the model is sent
    keep_recent_tool_results: int = 5  # outputs microcompact never replaces
    cache_cold_seconds: int = 300  # the provider's prompt cache is gone after this idle time

    @property
    def compression_threshold(self) -> int:
        """Prompt tokens at which auto compact runs."""
        return self.context_window - self.autocompact_buffer


SETTINGS = tuple(f.name for f in fields(ModelProfile) if f.name != "name")


def current_model() -> str:
    """The model this deployment talks to (``RTC_MODEL``)."""
    from apps.turns.llm import DEFAULT_MODEL

    return getattr(settings, "RTC_MODEL", "") or DEFAULT_MODEL


def profile_for(model: str | None = None) -> ModelProfile:
    """The settings of ``model`` (None: ``RTC_MODEL``) from its admin row, else the defaults."""
    from apps.ops.selectors import price_of

    name = model or current_model()
    return profile_from(name, price_of(name))


def profile_from(name: str, row: Any | None) -> ModelProfile:
    """The profile of ``name`` from its ``ModelPrice`` row already read (None: defaults)."""
    if row is None:
        return ModelProfile(name=name)
    return ModelProfile(name=name, **{field: getattr(row, field) for field in SETTINGS})
