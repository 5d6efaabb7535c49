"""Wire shape of a remote tool call (``protocol/api.yaml`` ``Rtc``) as a plain dict."""

from __future__ import annotations

from typing import Any

from apps.sessions.serializers import id_or_empty, iso

from .models import Rtc


def rtc_to_dict(rtc: Rtc) -> dict[str, Any]:
    """An RTC as api.yaml's ``Rtc``, plus ``tool_call_id``, ``needs_approval`` and ``deadline``."""
    return {
        "id": str(rtc.id),
        "client_id": rtc.client_id,
        "session_id": str(rtc.session_id),
        "turn_id": str(rtc.turn_id),
        "message_id": id_or_empty(rtc.message_id),
        "output_message_id": id_or_empty(rtc.output_message_id),
        "offset": rtc.offset,
        "tool_call_id": rtc.tool_call_id,
        "tool_name": rtc.tool_name,
        "parameters": rtc.parameters,
        "status": rtc.status,
        "needs_approval": rtc.needs_approval,
        "result": rtc.result,
        "error_message": rtc.error_message,
        "deadline": iso(rtc.deadline),
        "created_at": iso(rtc.created_at),
        "updated_at": iso(rtc.updated_at),
        "sent_at": iso(rtc.sent_at),
        "started_at": iso(rtc.started_at),
        "completed_at": iso(rtc.completed_at),
        "deleted_at": iso(rtc.deleted_at),
    }
