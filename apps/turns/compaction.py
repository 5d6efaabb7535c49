"""Manual context compaction (``v1.session.compact``).

The request is queued like a message, so it runs between turns, never inside one. The worker
asks the model for a structured summary of the conversation so far and stores it as a
``summary`` message; from then on prompts start from the latest summary instead of the messages
it replaced (``apps.turns.runner``). At most one compaction per session is queued at a time.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import transaction

from apps.gateway.events import item, publish_update
from apps.sessions.models import ContentType, Message, MessageRole, Session
from apps.sessions.serializers import message_to_dict
from apps.sessions.services import session_allocate_offsets
from apps.turns import queue
from apps.turns.llm import ChatModel, TextDelta
from apps.turns.llm_errors import LLMError
from rtcagent.redis import get_redis

log = logging.getLogger(__name__)

PENDING_TTL = 3600  # longer than a turn may wait on askUser (30 min)
SUMMARY_PROMPT = (
    "Summarize the conversation so far for your own later use; it will replace the messages "
    "it covers. Use these sections: 1. Primary request and intent 2. Key concepts "
    "3. Files and code touched 4. Errors and fixes 5. Problem solving 6. All user messages "
    "(briefly) 7. Pending tasks 8. Current work 9. Next step. Be complete but concise."
)


def _pending_key(session_id: object) -> str:
    return f"rtc:compact:{{{session_id}}}"


def request_compaction(session: Session, instruction: str) -> bool:
    """Queue a compaction behind the session's turns; False when one is already queued."""
    if not get_redis().set(_pending_key(session.id), "1", nx=True, ex=PENDING_TTL):
        return False
    queue.enqueue(
        str(session.id),
        {"kind": "compact", "session_id": str(session.id), "instruction": instruction},
        user_id=session.user_id,
    )
    return True


def compact(session_id: str, instruction: str, llm: ChatModel) -> Message | None:
    """Summarize the session's conversation into a ``summary`` message (None if nothing to do)."""
    from apps.turns.runner import conversation_for

    try:
        session = Session.objects.filter(pk=session_id, deleted_at__isnull=True).first()
        if session is None:
            return None
        history = conversation_for(session)
        if len([m for m in history if m["role"] in ("user", "assistant")]) < 2:
            return None
        ask = SUMMARY_PROMPT + (f"\n\nAlso: {instruction}" if instruction else "")
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You write summaries of conversations."},
            *history,
            {"role": "user", "content": ask},
        ]
        try:
            text = "".join(
                e.text for e in llm.stream(messages, None) if isinstance(e, TextDelta)
            ).strip()
        except LLMError as err:
            log.warning("compaction of session %s failed: %s", session_id, err.category)
            return None
        if not text:
            return None
        with transaction.atomic():
            offset = session_allocate_offsets(session_id=session.id)
            msg = Message.objects.create(
                session_id=session.id, user_id=session.user_id,
                client_id=f"turn:compact:{uuid.uuid4().hex}", global_offset=offset,
                role=MessageRole.SYSTEM,
                content={"type": ContentType.SUMMARY,
                         "data": [{"title": "Summary of the earlier conversation",
                                   "content": text}]},
            )
            publish_update(user_id=session.user_id, items=[item("message", "created", msg.id)],
                           data_list=[message_to_dict(msg)])
        return msg
    finally:
        get_redis().delete(_pending_key(session_id))
