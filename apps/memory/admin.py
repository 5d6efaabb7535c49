"""Operator console for memory: user memories are visible, searchable, editable and exportable
as JSON (an action on the selection); session memories are visible, deletable and exportable.

Edits go through the model form (the ``choices`` keep category and importance valid); the
full-text index follows by itself (PostgreSQL's is an expression index, SQLite's FTS5 table is
kept by triggers), so nothing here has to remember it.
"""

from __future__ import annotations

from typing import Any

import orjson
from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from apps.sessions.admin import short
from rtcagent.errors import InvalidRequest

from .limits import memory_setting
from .models import ExtractionState, MemorySource, SessionMemory, UserMemory
from .serializers import session_memory_to_dict, user_memory_to_dict


def _download(data: list[dict[str, Any]], name: str) -> HttpResponse:
    body = {"exported_at": timezone.now().isoformat(), "items": data}
    response = HttpResponse(orjson.dumps(body, option=orjson.OPT_INDENT_2),
                            content_type="application/json")
    response["Content-Disposition"] = (
        f'attachment; filename="{name}-{timezone.now().date().isoformat()}.json"'
    )
    return response


class UserMemoryForm(forms.ModelForm):
    class Meta:
        model = UserMemory
        fields = ("user", "category", "importance", "content", "session")

    def clean_content(self) -> str:
        from .services import check_content

        try:
            return check_content(self.cleaned_data.get("content"),
                                 max_chars=int(memory_setting("MEMORY_USER_MAX_CHARS")))
        except InvalidRequest as exc:
            raise forms.ValidationError(exc.message.partition(": ")[2] or exc.message) from None


@admin.register(UserMemory)
class UserMemoryAdmin(admin.ModelAdmin):
    form = UserMemoryForm
    list_display = ("id", "user", "importance", "category", "text", "source", "updated_at")
    list_select_related = ("user",)
    list_filter = ("importance", "category", "source")
    search_fields = ("content", "user__email")
    raw_id_fields = ("user", "session")
    date_hierarchy = "updated_at"
    ordering = ("-updated_at", "-id")
    readonly_fields = ("source", "created_at", "updated_at")
    fields = ("user", "category", "importance", "content", "session", "source", "created_at",
              "updated_at")
    actions = ("export_json",)

    @admin.display(description="content", ordering="content")
    def text(self, obj: UserMemory) -> str:
        return short(" ".join(obj.content.split()), 80)

    def save_model(self, request: HttpRequest, obj: UserMemory, form: Any, change: bool) -> None:
        if not change:
            obj.source = MemorySource.OPERATOR
        super().save_model(request, obj, form, change)

    @admin.action(description="Export selected as JSON")
    def export_json(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        rows = queryset.select_related("user").order_by("user_id", "created_at", "id")
        return _download([{**user_memory_to_dict(m), "user": m.user.email} for m in rows],
                         "user-memories")


@admin.register(SessionMemory)
class SessionMemoryAdmin(admin.ModelAdmin):
    list_display = ("id", "session_id", "user", "category", "text", "tokens", "source",
                    "created_at")
    list_select_related = ("user",)
    list_filter = ("category", "source")
    search_fields = ("content", "user__email", "session__id")
    raw_id_fields = ("session", "user")
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    readonly_fields = ("session", "user", "category", "content", "tokens", "source",
                       "created_at")
    actions = ("export_json",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # written by the extraction and the agent, bounded per session

    @admin.display(description="content", ordering="content")
    def text(self, obj: SessionMemory) -> str:
        return short(" ".join(obj.content.split()), 80)

    @admin.action(description="Export selected as JSON")
    def export_json(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        rows = queryset.select_related("user").order_by("session_id", "id")
        return _download([{**session_memory_to_dict(m), "session_id": str(m.session_id),
                           "user": m.user.email} for m in rows], "session-memories")


@admin.register(ExtractionState)
class ExtractionStateAdmin(admin.ModelAdmin):
    list_display = ("session_id", "runs", "last_offset", "last_tokens", "extracted_at",
                    "retry_after")
    ordering = ("-extracted_at",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
