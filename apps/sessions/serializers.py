"""Wire shapes of sessions and messages (``protocol/api.yaml``): plain, JSON-ready dicts.

Ids are strings, datetimes ISO 8601 in UTC with ``Z`` (``None`` when unset). These dicts are
what RPC queries answer and what Updates carry in ``data_list``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .models import Message, MessageRole, Session


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC, ``Z`` suffix; ``None`` stays ``None``."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def id_or_empty(value: object) -> str:
    return "" if value is None else str(value)


def session_to_dict(session: Session) -> dict[str, Any]:
    """A Session as api.yaml's ``Session``, plus ``work_mode``."""
    parent = session.parent_session if session.parent_session_id else None
    root = session.root_session if session.root_session_id else None
    return {
        "id": str(session.id),
        "client_id": session.client_session_id,
        "owner_kind": "user",
        "owner_ref_id": str(session.user_id),
        "device_id": session.device_id,
        "title": session.title,
        "status": session.status,
        "work_mode": session.work_mode,
        "todo_list": session.todo_list,
        "agent_prompt": session.agent_prompt,
        "root_client_session_id": root.client_session_id if root else "",
        "root_server_session_id": id_or_empty(session.root_session_id),
        "parent_client_session_id": parent.client_session_id if parent else "",
        "parent_server_session_id": id_or_empty(session.parent_session_id),
        "sub_agent_parent_message_id": id_or_empty(session.sub_agent_parent_message_id),
        "closed_at": iso(session.closed_at),
        "deleted_at": iso(session.deleted_at),
        "total_input_tokens": session.total_input_tokens,
        "total_output_tokens": session.total_output_tokens,
        "total_tokens": session.total_tokens,
        "current_context_tokens": session.current_context_tokens,
        "total_cached_read_tokens": session.total_cached_read_tokens,
        "total_cached_write_tokens": session.total_cached_write_tokens,
        "total_reasoning_tokens": session.total_reasoning_tokens,
        "total_cost_usd": session.total_cost_usd,
        "last_token_update_at": iso(session.last_token_update_at),
        "compression_threshold": session.compression_threshold,
        "compression_progress": session.compression_progress,
        "rounds_until_compression": session.rounds_until_compression,
        "estimated_next_round_tokens": session.estimated_next_round_tokens,
        "created_at": iso(session.created_at),
        "updated_at": iso(session.updated_at),
    }


def message_to_dict(message: Message) -> dict[str, Any]:
    """A Message as api.yaml's ``Message``; ``content`` is the ``{type, data}`` object."""
    by_user = message.role == MessageRole.USER
    return {
        "id": str(message.id),
        "client_id": message.client_id,
        "session_id": str(message.session_id),
        "turn_id": id_or_empty(message.turn_id),
        "parent_message_id": id_or_empty(message.parent_message_id),
        "global_offset": message.global_offset,
        "turn_offset": message.turn_offset,
        "role": message.role,
        "content": message.content,
        "streaming_status": message.streaming_status,
        "creator_kind": "user" if by_user else "system",
        "creator_ref_id": str(message.user_id) if by_user else "system",
        "input_tokens": message.input_tokens,
        "output_tokens": message.output_tokens,
        "total_tokens": message.total_tokens,
        "cached_tokens": message.cached_tokens,
        "reasoning_tokens": message.reasoning_tokens,
        "created_at": iso(message.created_at),
        "updated_at": iso(message.updated_at),
        "deleted_at": iso(message.deleted_at),
    }
