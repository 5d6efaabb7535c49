"""Operator console for sessions and messages.

Statuses are read-only here: they move only through the services' state machines, never by
editing a form. A session shows its latest turns, messages and RTCs inline (read-only, at most
``INLINE_LIMIT`` of each, so a long session's page stays fast) with links to all of them. Actions
call the same services as the RPCs: stop the open turn, close.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html_join

from apps.rtc.models import Rtc
from apps.turns.models import Turn
from rtcagent.errors import RtcError

from .models import Message, Session
from .services import session_close

INLINE_LIMIT = 50
LABEL_CHARS = 40  # list columns stay narrow enough for 1280 px screens

# The side navigation takes a third of a 1280 px screen from every list: the index and the
# breadcrumbs lead everywhere it does.
admin.site.enable_nav_sidebar = False


def short(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def session_label(session: Session) -> str:
    """A session in a list column: its title, cut short, or the start of its id."""
    return short(session.title) if session.title else f"{str(session.id)[:8]}…"


def content_preview(content: Any, limit: int = 140) -> str:
    """A message content ``{type, data}`` as one short line of text."""
    data = (content or {}).get("data", "") if isinstance(content, dict) else content
    if isinstance(data, dict) and isinstance(data.get("text"), str):
        data = data["text"]
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True
    classes = ("collapse",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class _LatestOfSession(_ReadOnlyInline):
    """Only the session's latest ``INLINE_LIMIT`` rows (by ``order_field``), oldest first."""

    order_field = "created_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request)
        match = request.resolver_match
        object_id = match.kwargs.get("object_id") if match is not None else None
        if object_id is None:
            return qs.none()
        latest = (qs.filter(session_id=object_id).order_by(f"-{self.order_field}")
                  .values_list("pk", flat=True)[:INLINE_LIMIT])
        return qs.filter(pk__in=list(latest)).order_by(self.order_field)


class MessageInline(_LatestOfSession):
    model = Message
    fk_name = "session"
    verbose_name_plural = f"messages (the latest {INLINE_LIMIT})"
    order_field = "global_offset"
    fields = ("global_offset", "role", "content_type", "preview", "streaming_status",
              "created_at")
    readonly_fields = fields

    @admin.display(description="content")
    def preview(self, obj: Message) -> str:
        return content_preview(obj.content)


class TurnInline(_LatestOfSession):
    model = Turn
    verbose_name_plural = f"turns (the latest {INLINE_LIMIT})"
    fields = ("status", "error_message", "total_tokens", "started_at", "completed_at",
              "created_at")
    readonly_fields = fields


class RtcInline(_LatestOfSession):
    model = Rtc
    verbose_name = "RTC"
    verbose_name_plural = f"RTCs (the latest {INLINE_LIMIT})"
    fields = ("tool_name", "status", "needs_approval", "error_message", "deadline",
              "completed_at", "created_at")
    readonly_fields = fields


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "status", "work_mode", "total_tokens", "updated_at")
    list_select_related = ("user",)
    list_filter = ("status", "work_mode", ("deleted_at", admin.EmptyFieldListFilter))
    search_fields = ("id", "client_session_id", "title", "user__email", "device_id")
    raw_id_fields = ("user", "parent_session", "root_session", "sub_agent_parent_message")
    readonly_fields = (
        "id",
        "status",
        "activity",
        "last_message_offset",
        "closed_at",
        "created_at",
        "updated_at",
        "last_token_update_at",
    )
    date_hierarchy = "created_at"
    ordering = ("-updated_at",)
    inlines = (TurnInline, MessageInline, RtcInline)
    actions = ("stop_open_turn", "close_sessions")

    @admin.display(description="session", ordering="title")
    def name(self, obj: Session) -> str:
        return session_label(obj)

    @admin.display(description="all of it")
    def activity(self, obj: Session) -> str:
        links = (
            ("admin:turns_turn_changelist", obj.turns.count(), "turns"),
            ("admin:agent_sessions_message_changelist", obj.messages.count(), "messages"),
            ("admin:rtc_rtc_changelist", obj.rtcs.count(), "RTCs"),
        )
        return format_html_join(
            " · ", '<a href="{}?session={}">{} {}</a>',
            ((reverse(name), obj.pk, count, label) for name, count, label in links),
        )

    @admin.action(description="Stop the open turn", permissions=("change",))
    def stop_open_turn(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        from apps.turns.services import turn_stop

        stopped = 0
        for session in queryset.only("id", "user_id"):
            try:
                stopped += turn_stop(user_id=session.user_id, session_id=session.id) is not None
            except RtcError as exc:  # a soft-deleted session: nothing to stop for its owner
                self.message_user(request, f"{session.id}: {exc}", messages.WARNING)
        self.message_user(request, f"Asked {stopped} open turn(s) to stop; a running one stops "
                                   "within a second.", messages.SUCCESS)

    @admin.action(description="Close", permissions=("change",))
    def close_sessions(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        closed = 0
        for session in queryset.only("id", "user_id"):
            try:
                change = session_close(user_id=session.user_id, session_id=session.id)
            except RtcError as exc:
                self.message_user(request, f"{session.id}: {exc}", messages.WARNING)
                continue
            closed += bool(change.updates)
        self.message_user(request, f"Closed {closed} session(s).", messages.SUCCESS)


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("offset", "session_name", "role", "preview", "streaming_status",
                    "created_at")
    list_select_related = ("session",)
    list_filter = ("role", "streaming_status")
    list_display_links = ("offset", "preview")
    search_fields = ("id", "client_id", "session__id", "user__email")
    raw_id_fields = ("session", "user", "turn", "parent_message")
    readonly_fields = ("id", "global_offset", "created_at", "updated_at")
    ordering = ("-created_at",)

    @admin.display(description="#", ordering="global_offset")
    def offset(self, obj: Message) -> int:
        return obj.global_offset

    @admin.display(description="content")
    def preview(self, obj: Message) -> str:
        return f"{obj.content_type}: {content_preview(obj.content, limit=40)}"

    @admin.display(description="session", ordering="session__title")
    def session_name(self, obj: Message) -> str:
        return session_label(obj.session)

