"""The product's admin theme (django-admin-interface), installed and made the active one.

The logo is not a file here (the theme's FileField would live in the object store): it is an
inline SVG set by templates/admin/base_site.html over the theme's default logo.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import migrations

log = logging.getLogger(__name__)

NAME = "rtcagent"
NAVY, BLUE, AMBER, WHITE = "#14213D", "#1D4ED8", "#FCA311", "#FFFFFF"
THEME: dict[str, Any] = {
    "title": "rtcagent console",
    "title_color": WHITE,
    "title_visible": True,
    "logo_visible": True,
    "logo_color": AMBER,
    "logo_max_width": 160,
    "logo_max_height": 36,
    "css_header_background_color": NAVY,
    "css_header_text_color": "#E5E7EB",
    "css_header_link_color": WHITE,
    "css_header_link_hover_color": AMBER,
    "css_module_background_color": "#1D3557",
    "css_module_background_selected_color": "#E8EEF7",
    "css_module_text_color": WHITE,
    "css_module_link_color": WHITE,
    "css_module_link_selected_color": "#FFD166",
    "css_module_link_hover_color": AMBER,
    "css_module_rounded_corners": True,
    "css_generic_link_color": BLUE,
    "css_generic_link_hover_color": "#0B3AA8",
    "css_generic_link_active_color": NAVY,
    "css_save_button_background_color": BLUE,
    "css_save_button_background_hover_color": NAVY,
    "css_save_button_text_color": WHITE,
    "css_delete_button_background_color": "#B91C1C",
    "css_delete_button_background_hover_color": "#7F1D1D",
    "css_delete_button_text_color": WHITE,
    "related_modal_active": True,
    "list_filter_dropdown": True,
    "list_filter_sticky": True,
    "foldable_apps": True,
    "recent_actions_visible": True,
    "env_visible_in_header": False,
    "env_visible_in_favicon": False,
}


def _forget_cached_theme() -> None:
    """The active theme is cached (in Redis): a cached stock theme would outlive the migration."""
    try:
        from admin_interface.cache import del_cached_active_theme

        del_cached_active_theme()
    except Exception:  # Redis away during release: the cache entry has no expiry, say so
        log.warning("could not clear the cached admin theme; clear the cache key "
                    "'admin_interface_theme' or it keeps showing the previous theme")


def install(apps: Any, schema_editor: Any) -> None:
    theme_model = apps.get_model("admin_interface", "Theme")
    # Historical models run no signals: deactivate the others here.
    theme_model.objects.exclude(name=NAME).update(active=False)
    theme_model.objects.update_or_create(name=NAME, defaults={**THEME, "active": True})
    _forget_cached_theme()


def uninstall(apps: Any, schema_editor: Any) -> None:
    theme_model = apps.get_model("admin_interface", "Theme")
    theme_model.objects.filter(name=NAME).delete()
    first = theme_model.objects.order_by("pk").first()
    if first is not None:
        theme_model.objects.filter(pk=first.pk).update(active=True)
    _forget_cached_theme()


class Migration(migrations.Migration):
    dependencies = [
        ("ops", "0001_model_price"),
        ("admin_interface", "0032_alter_theme_defaults"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
