"""Per-model settings the operator edits in the admin: prices, and the context window and
budgets of ``apps.turns.profiles`` (one row per model name, as in ``RTC_MODEL``).

Each LLM call is priced with the row of the model that served it (``apps.turns.accounting``);
the usage page, which reads turns (they do not record their model), prices them with the row of
the model configured now. Without a row, cost stays empty and the profile's defaults apply.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.db.models import F, Q

from apps.turns.profiles import ModelProfile

_DEFAULT = ModelProfile(name="")


def _price(label: str, **kwargs: object) -> models.DecimalField:
    return models.DecimalField(f"{label}, USD per 1M tokens", max_digits=10, decimal_places=4,
                               **kwargs)


class ModelPrice(models.Model):
    model = models.CharField(
        "model name", max_length=128, unique=True, help_text="As in RTC_MODEL, e.g. gpt-4.1-mini."
    )
    input_per_million = _price("input")
    cached_input_per_million = _price(
        "cached input", null=True, blank=True,
        help_text="Tokens read from the prompt cache. Empty: the input price.",
    )
    cache_write_per_million = _price(
        "cache write", null=True, blank=True,
        help_text="Tokens written to the prompt cache, where the provider reports and bills them "
                  "(Anthropic-style caching). Empty: the input price.",
    )
    output_per_million = _price("output", help_text="Reasoning tokens are billed as output.")

    context_window = models.PositiveIntegerField(
        "context window, tokens", default=_DEFAULT.context_window,
        help_text="The most prompt and answer tokens the model takes in one call.",
    )
    max_output_tokens = models.PositiveIntegerField(
        "max output, tokens", default=_DEFAULT.max_output_tokens,
    )
    autocompact_buffer = models.PositiveIntegerField(
        "auto-compact buffer, tokens", default=_DEFAULT.autocompact_buffer,
        help_text="Auto compact runs when the prompt reaches the window less this buffer "
                  "(the compression threshold).",
    )
    tool_result_budget = models.PositiveIntegerField(
        "tool result budget, tokens", default=_DEFAULT.tool_result_budget,
        help_text="A longer tool output is cut to its head and tail.",
    )
    keep_recent_tool_results = models.PositiveIntegerField(
        "recent tool results kept", default=_DEFAULT.keep_recent_tool_results,
        help_text="Microcompact never replaces the outputs of this many latest tool calls.",
    )
    cache_cold_seconds = models.PositiveIntegerField(
        "prompt cache cold after, seconds", default=_DEFAULT.cache_cold_seconds,
        help_text="After this idle time the provider's prompt cache is taken as gone.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "model setting"
        verbose_name_plural = "model settings"
        ordering = ("model",)
        constraints = [
            models.CheckConstraint(
                condition=Q(autocompact_buffer__lt=F("context_window")),
                name="modelprice_buffer_below_window",
                violation_error_message="The auto-compact buffer must be below the window.",
            ),
            models.CheckConstraint(
                condition=Q(max_output_tokens__gt=0) & Q(max_output_tokens__lt=F("context_window")),
                name="modelprice_output_within_window",
                violation_error_message="The max output must be above 0 and below the window.",
            ),
            models.CheckConstraint(
                condition=Q(input_per_million__gte=0) & Q(output_per_million__gte=0)
                & (Q(cached_input_per_million__isnull=True) | Q(cached_input_per_million__gte=0))
                & (Q(cache_write_per_million__isnull=True) | Q(cache_write_per_million__gte=0)),
                name="modelprice_prices_not_negative",
                violation_error_message="Prices cannot be negative.",
            ),
            models.CheckConstraint(
                condition=Q(tool_result_budget__gt=0),
                name="modelprice_tool_budget_positive",
                violation_error_message="The tool result budget must be above 0.",
            ),
        ]

    def __str__(self) -> str:
        return self.model

    def cost(self, *, input_tokens: int, cached_tokens: int, output_tokens: int,
             cache_write_tokens: int = 0) -> Decimal:
        """USD for that usage. ``input_tokens`` includes the cached and cache-written ones (as
        providers report ``prompt_tokens``); ``output_tokens`` includes reasoning."""
        cached_price = self.cached_input_per_million
        if cached_price is None:
            cached_price = self.input_per_million
        write_price = self.cache_write_per_million
        if write_price is None:
            write_price = self.input_per_million
        fresh = max(0, input_tokens - cached_tokens - cache_write_tokens)
        total = (fresh * self.input_per_million + cached_tokens * cached_price
                 + cache_write_tokens * write_price + output_tokens * self.output_per_million)
        return total / Decimal(1_000_000)
