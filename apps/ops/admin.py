"""Admin of the operations app: model settings and prices, and the theme kept to superusers.

The theme (django-admin-interface) is the product's, installed by a migration; staff who are not
superusers neither see its section nor open its pages, whatever permissions they were given.
"""

from __future__ import annotations

from typing import Any

from admin_interface.admin import ThemeAdmin as StockThemeAdmin
from admin_interface.models import Theme
from django.contrib import admin
from django.http import HttpRequest

from .models import ModelPrice


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    """One row per model name: what its calls cost and how much context it takes. A model
    without a row is not priced and gets the defaults of ``apps.turns.profiles``."""

    list_display = ("model", "input_per_million", "cached_input_per_million",
                    "cache_write_per_million", "output_per_million", "context_window",
                    "compression_threshold", "updated_at")
    search_fields = ("model",)
    readonly_fields = ("compression_threshold", "updated_at")
    fieldsets = (
        (None, {"fields": ("model",)}),
        ("Prices (USD per 1M tokens)", {"fields": (
            "input_per_million", "cached_input_per_million", "cache_write_per_million",
            "output_per_million")}),
        ("Context", {"fields": (
            "context_window", "max_output_tokens", "autocompact_buffer", "compression_threshold",
            "tool_result_budget", "keep_recent_tool_results", "cache_cold_seconds")}),
        (None, {"fields": ("updated_at",)}),
    )

    @admin.display(description="compression threshold")
    def compression_threshold(self, obj: ModelPrice) -> str:
        if obj.pk is None:
            return "window less buffer, once saved"
        return f"{obj.context_window - obj.autocompact_buffer:,} tokens"


admin.site.unregister(Theme)


@admin.register(Theme)
class ThemeAdmin(StockThemeAdmin):
    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_module_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)
