"""Operator console for sessions and messages.

Statuses are read-only here: they move only through the services' state machines, never by
editing a form. Messages and turns show inline (read-only) on their session.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.turns.models import Turn

from .models import Message, Session


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True
    classes = ("collapse",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MessageInline(_ReadOnlyInline):
    model = Message
    fk_name = "session"
    fields = ("global_offset", "role", "content", "streaming_status", "turn", "created_at")
    readonly_fields = fields
    ordering = ("global_offset",)


class TurnInline(_ReadOnlyInline):
    model = Turn
    fields = ("id", "status", "error_message", "started_at", "completed_at", "created_at")
    readonly_fields = fields
    ordering = ("created_at",)


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "title",
        "user",
        "status",
        "work_mode",
        "total_tokens",
        "updated_at",
        "deleted_at",
    )
    list_filter = ("status", "work_mode", ("deleted_at", admin.EmptyFieldListFilter))
    search_fields = ("id", "client_session_id", "title", "user__email", "device_id")
    raw_id_fields = ("user", "parent_session", "root_session", "sub_agent_parent_message")
    readonly_fields = (
        "id",
        "status",
        "last_message_offset",
        "closed_at",
        "created_at",
        "updated_at",
        "last_token_update_at",
    )
    date_hierarchy = "created_at"
    ordering = ("-updated_at",)
    inlines = (TurnInline, MessageInline)


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "session",
        "global_offset",
        "role",
        "content_type",
        "streaming_status",
        "created_at",
    )
    list_filter = ("role", "streaming_status")
    search_fields = ("id", "client_id", "session__id", "user__email")
    raw_id_fields = ("session", "user", "turn", "parent_message")
    readonly_fields = ("id", "global_offset", "created_at", "updated_at")
    ordering = ("-created_at",)
