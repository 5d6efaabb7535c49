"""Operator console for attachments: read-only (rows are written once, by the worker)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.sessions.admin import session_label, short

from .models import Attachment


@admin.register(Attachment)
class AttachmentAdmin(admin.ModelAdmin):
    list_display = ("file_name", "kind", "status", "mimetype", "size", "session_name", "user",
                    "created_at")
    list_select_related = ("session", "user")
    list_filter = ("kind", "status", "mimetype")
    search_fields = ("id", "fileid", "name", "session__id", "message__id", "user__email")
    raw_id_fields = ("session", "message", "user")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    exclude = ("text",)  # up to 256 KB: not for a form

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="file", ordering="name")
    def file_name(self, obj: Attachment) -> str:
        return short(obj.name or obj.fileid, 40)

    @admin.display(description="session", ordering="session__title")
    def session_name(self, obj: Attachment) -> str:
        return session_label(obj.session)
