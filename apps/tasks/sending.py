"""Messages sent into a session on behalf of a goal or a loop.

They are ordinary user messages, sent through ``apps.sessions.services.message_send``: the same
validation, the user's caps (``RateLimited``), the ``session`` and ``message`` Updates, and the
queue item after commit, so the worker starts their turn like any other, in order behind the
session's open turn. Two things mark them:

* ``client_id`` is ``goal:<goal id>:<round>`` or ``loop:<loop id>:<tick>``: one message per
  round or tick however often the sender is repeated (the user's ``client_id`` is unique).
* ``content.data.origin`` is ``{kind: "goal"|"loop", id, round|tick}`` (the widget shows who
  sent it; the model reads only the text).

A ``/goal`` or ``/loop`` typed in a new conversation creates its session with its first message
(``NewSession``: the fields a creating ``v1.message.send`` carries), as a first message would.
A lost queue item is found again by the worker's sweep (``queue_orphan_messages``), as for any
user message.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from apps.sessions.services import MessageSent, message_send


@dataclass(frozen=True)
class NewSession:
    """The session a first message creates: the sending device executes its browser tools."""

    client_session_id: str
    device_id: str = ""
    agent_prompt: str | None = None
    work_mode: str | None = None
    host_functions: list[dict[str, Any]] | None = None


def send_prompt(
    *, user_id: int, session_id: uuid.UUID | str | None, text: str, client_id: str,
    origin: dict[str, Any], new_session: NewSession | None = None,
) -> MessageSent:
    """Send ``text`` as a user message into the session (inside the caller's transaction), or
    create the session with it when ``session_id`` is ``None`` (``new_session`` says how).

    Raises what ``message_send`` raises: ``RateLimited`` beyond the user's caps,
    ``InvalidState`` for a closed session, ``NotFound`` for one gone, ``ClientIdConflict`` when
    this round or tick was sent already, ``InvalidRequest`` for bad session fields; a refusal
    writes nothing.
    """
    extra: dict[str, Any] = {}
    if session_id is None:
        if new_session is None:
            raise ValueError("a session id, or what creates the session")
        extra = {"device_id": new_session.device_id,
                 "client_session_id": new_session.client_session_id,
                 "agent_prompt": new_session.agent_prompt, "work_mode": new_session.work_mode,
                 "host_functions": new_session.host_functions}
    return message_send(
        user_id=user_id, client_id=client_id, server_session_id=session_id,
        content={"type": "user_message", "data": {"text": text, "origin": origin}},
        **{"device_id": "", **extra},
    )
