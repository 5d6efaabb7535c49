"""Wire shapes of sessions and messages (``docs/protocol.md`` §6), as ``apps.gateway.wire`` schemas.

They render the rows (``session_to_dict``, ``message_to_dict``: what RPC queries answer and what
Updates carry in ``data_list``) and check decoded JSON (``wire.check``). Ids are strings,
datetimes ISO 8601 in UTC with ``Z`` (``null`` when unset), absent references ``""``.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway import wire
from apps.gateway.wire import Derived, Id, RefId, Timestamp, WireSerializer, iso
from apps.turns.llm_errors import CATEGORIES

from .models import (
    ContentType,
    Message,
    MessageRole,
    Session,
    SessionStatus,
    StreamingStatus,
    WorkMode,
)

__all__ = ["MessageSerializer", "SessionSerializer", "iso", "message_to_dict", "session_to_dict"]


def _text(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(allow_blank=True, **kwargs)


def _count() -> serializers.IntegerField:
    return serializers.IntegerField()


class TodoItem(WireSerializer):
    content = _text()
    status = serializers.ChoiceField(choices=["pending", "in_progress", "completed"])
    active_form = _text()


@wire.entity("session")
class SessionSerializer(WireSerializer):
    """api.yaml's ``Session``, plus ``work_mode``."""

    id = Id()
    client_id = _text(source="client_session_id")
    owner_kind = Derived(lambda s: "user", like=serializers.ChoiceField(choices=["user", "system"]))
    owner_ref_id = serializers.CharField(source="user_id")
    device_id = _text()
    title = _text()
    status = serializers.ChoiceField(choices=SessionStatus.choices)
    work_mode = serializers.ChoiceField(choices=WorkMode.choices)
    todo_list = TodoItem(many=True)
    agent_prompt = _text()
    root_client_session_id = Derived(
        lambda s: s.root_session.client_session_id if s.root_session_id else "", like=_text()
    )
    root_server_session_id = RefId(source="root_session_id")
    parent_client_session_id = Derived(
        lambda s: s.parent_session.client_session_id if s.parent_session_id else "", like=_text()
    )
    parent_server_session_id = RefId(source="parent_session_id")
    sub_agent_parent_message_id = RefId()
    closed_at = Timestamp(allow_null=True)
    deleted_at = Timestamp(allow_null=True)
    total_input_tokens = _count()
    total_output_tokens = _count()
    total_tokens = _count()
    current_context_tokens = _count()
    total_cached_read_tokens = _count()
    total_cached_write_tokens = _count()
    total_reasoning_tokens = _count()
    total_cost_usd = serializers.FloatField()
    last_token_update_at = Timestamp(allow_null=True)
    compression_threshold = _count()
    compression_progress = serializers.FloatField()
    rounds_until_compression = _count()
    estimated_next_round_tokens = _count()
    created_at = Timestamp()
    updated_at = Timestamp()


# --- message content: {type, data}, data by type ---------------------------------------------


class SummaryItem(WireSerializer):
    title = _text()
    content = _text()


class ToolCallInput(WireSerializer):
    """api.yaml's ``ToolCall`` as the model issued it. ``id`` is the model's tool call id,
    ``input`` the raw JSON string of its arguments."""

    id = _text()
    tool_name = _text()
    input = _text()


class ToolCallOutput(ToolCallInput):
    """The same ``ToolCall`` with what the model was told (``output``) and how it ended."""

    output = _text()
    status = serializers.ChoiceField(
        choices=["completed", "failed", "timeout", "rejected", "done", "error", "cancelled"]
    )


class UserMessageData(WireSerializer):
    """api.yaml's ``UserMessageContent``; keys beyond these are stored as the client sent them."""

    open = True
    text = _text()
    files = serializers.ListField(child=wire.JSONObject(), required=False)
    scenarios = serializers.ListField(child=wire.JSONObject(), required=False)


class ErrorData(WireSerializer):
    category = serializers.ChoiceField(choices=CATEGORIES)
    title = _text()
    message = _text()
    retryable = serializers.BooleanField()
    raw_error = _text(required=False)


CONTENT_DATA: dict[str, Any] = {
    ContentType.MARKDOWN: _text(),
    ContentType.TEXT: _text(),
    ContentType.THINKING: _text(),
    ContentType.SUMMARY: SummaryItem(many=True),
    ContentType.TOOLCALL_INPUT: ToolCallInput,
    ContentType.TOOLCALL_OUTPUT: ToolCallOutput,
    ContentType.USER_MESSAGE: UserMessageData,
    ContentType.ERROR: ErrorData,
    ContentType.PROMPT: wire.JSONObject(),
}


class Content(WireSerializer):
    type = serializers.ChoiceField(choices=ContentType.choices)
    data = serializers.JSONField()

    def check_value(self, value: dict[str, Any], path: str) -> None:
        wire.check(CONTENT_DATA[value["type"]], value["data"], f"{path}.data")


def _created_by_user(m: Message) -> bool:
    return m.role == MessageRole.USER


@wire.entity("message")
class MessageSerializer(WireSerializer):
    """api.yaml's ``Message``; ``content`` is the ``{type, data}`` object (not a string)."""

    id = Id()
    client_id = _text()
    session_id = Id()
    turn_id = RefId()
    parent_message_id = RefId()
    global_offset = serializers.IntegerField(min_value=1)
    turn_offset = serializers.IntegerField(min_value=0)
    role = serializers.ChoiceField(choices=MessageRole.choices)
    content = Content()
    streaming_status = serializers.ChoiceField(choices=StreamingStatus.choices)
    creator_kind = Derived(
        lambda m: "user" if _created_by_user(m) else "system",
        like=serializers.ChoiceField(choices=["user", "system"]),
    )
    creator_ref_id = Derived(
        lambda m: str(m.user_id) if _created_by_user(m) else "system",
        like=serializers.CharField(),
    )
    input_tokens = _count()
    output_tokens = _count()
    total_tokens = _count()
    cached_tokens = _count()
    reasoning_tokens = _count()
    created_at = Timestamp()
    updated_at = Timestamp()
    deleted_at = Timestamp(allow_null=True)


def session_to_dict(session: Session) -> dict[str, Any]:
    return SessionSerializer.render(session)


def message_to_dict(message: Message) -> dict[str, Any]:
    return MessageSerializer.render(message)
