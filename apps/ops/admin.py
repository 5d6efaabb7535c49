"""Admin of the operations app: model prices, and the theme kept to superusers.

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
    list_display = ("model", "input_per_million", "cached_input_per_million",
                    "output_per_million", "updated_at")
    search_fields = ("model",)


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
