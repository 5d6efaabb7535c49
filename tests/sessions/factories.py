"""Factories for sessions, messages, turns and RTCs, and a helper to call RPC handlers."""

from __future__ import annotations

import itertools
from typing import Any

from apps.gateway.registry import RpcContext, get_handler
from apps.rtc.models import Rtc
from apps.sessions.models import Message, MessageRole, Session
from apps.sessions.services import session_allocate_offsets
from apps.turns.models import Turn

_seq = itertools.count(1)


def make_session(user: Any, **fields: Any) -> Session:
    fields.setdefault("client_session_id", f"cs-{next(_seq)}")
    fields.setdefault("title", f"session {next(_seq)}")
    return Session.objects.create(user=user, **fields)


def make_message(session: Session, *, text: str = "hi", **fields: Any) -> Message:
    """A message at the session's next global_offset (allocated like the services do)."""
    fields.setdefault("role", MessageRole.USER)
    fields.setdefault("content", {"type": "text", "data": text})
    offset = session_allocate_offsets(session_id=session.id)
    return Message.objects.create(
        session=session, user_id=session.user_id, global_offset=offset, **fields
    )


def make_turn(session: Session, **fields: Any) -> Turn:
    return Turn.objects.create(session=session, user_id=session.user_id, **fields)


def make_rtc(turn: Turn, **fields: Any) -> Rtc:
    fields.setdefault("tool_call_id", f"call_{next(_seq)}")
    fields.setdefault("tool_name", "read")
    fields.setdefault("parameters", {"path": "/a.txt"})
    return Rtc.objects.create(session_id=turn.session_id, turn=turn, user_id=turn.user_id, **fields)


def call(method: str, user: Any, params: Any = None, *, device_id: str = "") -> Any:
    """Call an RPC handler the way the gateway does, as ``user``."""
    ctx = RpcContext(user_id=user.pk, client="test", device_id=device_id)
    return get_handler(method)(ctx, {} if params is None else params)


def walk(method: str, user: Any, params: dict[str, Any], *, limit: int) -> list[list[str]]:
    """Follow ``next_cursor`` to the end; the ids of each page."""
    pages: list[list[str]] = []
    cursor: Any = None
    while True:
        page = call(method, user, {**params, "cursor": cursor, "limit": limit})
        pages.append([item["id"] for item in page["items"]])
        cursor = page["next_cursor"]
        if cursor in ("", None):
            return pages
        assert len(pages) < 1000
