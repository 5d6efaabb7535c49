"""Memory rows as plain data (API, export, admin) and the API's input shapes."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .models import Importance, SessionMemory, UserCategory, UserMemory


def user_memory_to_dict(m: UserMemory) -> dict[str, Any]:
    return {
        "id": m.pk,
        "category": m.category,
        "importance": m.importance,
        "content": m.content,
        "session_id": str(m.session_id) if m.session_id else None,
        "created_at": m.created_at.isoformat(),
        "updated_at": m.updated_at.isoformat(),
    }


def session_memory_to_dict(m: SessionMemory) -> dict[str, Any]:
    return {
        "id": m.pk,
        "category": m.category,
        "content": m.content,
        "created_at": m.created_at.isoformat(),
    }


class ListParams(serializers.Serializer):
    q = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
    category = serializers.ChoiceField(UserCategory.choices, required=False)
    importance = serializers.ChoiceField(Importance.choices, required=False)
    session_id = serializers.UUIDField(required=False)  # those saved in one session
    cursor = serializers.CharField(required=False, allow_blank=True, max_length=500)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)


class MemoryPatch(serializers.Serializer):
    """Fields to change; the service checks the values (length, NUL, choices)."""

    content = serializers.CharField(required=False, trim_whitespace=False, allow_blank=True)
    category = serializers.CharField(required=False)
    importance = serializers.CharField(required=False)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({k: ["unknown field"] for k in unknown})
        if not data:
            raise serializers.ValidationError(
                {"non_field_errors": ["give at least one of content, category, importance"]}
            )
        return super().to_internal_value(data)


class MemoryOut(serializers.Serializer):
    """For the OpenAPI document: what ``user_memory_to_dict`` answers."""

    id = serializers.IntegerField()
    category = serializers.ChoiceField(UserCategory.choices)
    importance = serializers.ChoiceField(Importance.choices)
    content = serializers.CharField()
    session_id = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class MemoryPageOut(serializers.Serializer):
    items = MemoryOut(many=True)
    next_cursor = serializers.CharField(allow_blank=True)


class SessionMemoryOut(serializers.Serializer):
    id = serializers.IntegerField()
    category = serializers.CharField()
    content = serializers.CharField()
    created_at = serializers.DateTimeField()


class SessionMemoriesOut(serializers.Serializer):
    items = SessionMemoryOut(many=True)
