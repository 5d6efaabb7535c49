"""Helpers of the context tests (no tests here): a user's session driven through the real
services and the real worker code, in this process, against the scripted model over HTTP.

``Agent.send`` is what ``v1.message.send`` and a worker do (``message_send``, then
``Worker.start_turn``); ``Agent.submit`` what ``v1.rtc.submit_result`` and the resume item do.
Only the queue hop between them is skipped: the worker's methods are called directly.
"""

from __future__ import annotations

import uuid
from typing import Any

from apps.ops.models import ModelPrice
from apps.rtc.models import TERMINAL_RTC_STATUSES, Rtc
from apps.rtc.services import rtc_submit_result
from apps.sessions.models import Message, Session
from apps.sessions.services import message_send
from apps.turns.llm import OpenAIChat
from apps.turns.models import Turn
from apps.turns.worker import Worker
from rtcagent.redis import get_redis

MODEL = "scripted-model"


def set_profile(**values: Any) -> ModelPrice:
    """The admin row of the scripted model: its window, budgets and prices."""
    row, _ = ModelPrice.objects.update_or_create(
        model=MODEL, defaults={"input_per_million": 1, "output_per_million": 2, **values}
    )
    return row


def chat(base_url: str) -> OpenAIChat:
    return OpenAIChat(api_key="sk-test-key", base_url=base_url, model=MODEL, max_attempts=1)


class Agent:
    """One session of ``user``, its turns run by a worker in this process."""

    def __init__(self, user: Any, llm: Any) -> None:
        self.user = user
        self.llm = llm
        self.worker = Worker(llm_factory=lambda: chat(llm.base_url))
        self.session_id: str | None = None

    @property
    def session(self) -> Session:
        return Session.objects.get(pk=self.session_id)

    def send(self, text: str, **extra: Any) -> Turn:
        sent = message_send(
            user_id=self.user.id, device_id="",
            content={"type": "user_message", "data": {"text": text}},
            client_id=str(uuid.uuid4()), server_session_id=self.session_id, **extra,
        )
        self.session_id = str(sent.session.id)
        self.worker.start_turn(self.session_id, {"message_id": str(sent.message.id)})
        return Turn.objects.get(trigger_message=sent.message)

    def pending(self) -> Rtc:
        return Rtc.objects.exclude(status__in=TERMINAL_RTC_STATUSES).get(
            session_id=self.session_id)

    def submit(self, result: Any, *, success: bool = True) -> Turn:
        """The browser answers the open RTC; the worker resumes the turn."""
        rtc = self.pending()
        rtc_submit_result(user_id=self.user.id, rtc_id=rtc.id, success=success,
                          result=result if success else None,
                          error="" if success else str(result))
        self.worker.handle(self.session_id, {"kind": "resume", "turn_id": str(rtc.turn_id)})
        return Turn.objects.get(pk=rtc.turn_id)

    def turn(self) -> Turn:
        return Turn.objects.filter(session_id=self.session_id).order_by("-created_at").first()

    def summaries(self) -> list[Message]:
        return list(Message.objects.filter(session_id=self.session_id,
                                           content__type="summary").order_by("global_offset"))

    def cold(self) -> None:
        """The provider's prompt cache has expired: the session's last call was an hour ago."""
        key = f"rtc:ctx:{{{self.session_id}}}"
        last = get_redis().hget(key, "last_call")
        get_redis().hset(key, "last_call", str(float(last or 0) - 3600))


def bodies(llm: Any) -> list[dict[str, Any]]:
    return [r.body for r in llm.requests]


def tool_reply(name: str, arguments: dict[str, Any], call_id: str = "call_0",
               content: str = "") -> dict[str, Any]:
    reply: dict[str, Any] = {"tool_calls": [{"id": call_id, "name": name,
                                             "arguments": arguments}]}
    if content:
        reply["content"] = content
    return reply
