"""Wire shape of a turn (``protocol/api.yaml`` ``Turn``) as a plain, JSON-ready dict."""

from __future__ import annotations

from typing import Any

from apps.sessions.serializers import id_or_empty, iso

from .models import Turn


def turn_to_dict(turn: Turn) -> dict[str, Any]:
    """A Turn as api.yaml's ``Turn``, plus its trigger message and token usage."""
    return {
        "id": str(turn.id),
        "client_id": turn.client_id,
        "session_id": str(turn.session_id),
        "status": turn.status,
        "trigger_message_id": id_or_empty(turn.trigger_message_id),
        "error_message": turn.error_message,
        "input_tokens": turn.input_tokens,
        "output_tokens": turn.output_tokens,
        "total_tokens": turn.total_tokens,
        "cached_tokens": turn.cached_tokens,
        "reasoning_tokens": turn.reasoning_tokens,
        "created_at": iso(turn.created_at),
        "updated_at": iso(turn.updated_at),
        "started_at": iso(turn.started_at),
        "completed_at": iso(turn.completed_at),
        "deleted_at": iso(turn.deleted_at),
    }
