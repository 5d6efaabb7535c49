"""Prices of the models, for the cost column of the usage page.

Turns do not record which model served them: a deployment talks to one model (``RTC_MODEL``), so
usage is priced with the row of the model configured now. Without a row, cost stays empty.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models


class ModelPrice(models.Model):
    model = models.CharField(
        "model name", max_length=128, unique=True, help_text="As in RTC_MODEL, e.g. gpt-4.1-mini."
    )
    input_per_million = models.DecimalField(
        "input, USD per 1M tokens", max_digits=10, decimal_places=4
    )
    cached_input_per_million = models.DecimalField(
        "cached input, USD per 1M tokens", max_digits=10, decimal_places=4, null=True, blank=True,
        help_text="Empty: cached tokens cost the input price.",
    )
    output_per_million = models.DecimalField(
        "output, USD per 1M tokens", max_digits=10, decimal_places=4
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "model price"
        verbose_name_plural = "model prices"
        ordering = ("model",)

    def __str__(self) -> str:
        return self.model

    def cost(self, *, input_tokens: int, cached_tokens: int, output_tokens: int) -> Decimal:
        """USD for that usage; ``input_tokens`` includes the cached ones (as providers count)."""
        cached_price = self.cached_input_per_million
        if cached_price is None:
            cached_price = self.input_per_million
        fresh = max(0, input_tokens - cached_tokens)
        total = (fresh * self.input_per_million + cached_tokens * cached_price
                 + output_tokens * self.output_per_million)
        return total / Decimal(1_000_000)
