"""Helpers of the goal, loop and todo tests: turns as the worker leaves them, the Updates a user
got, waiting, and functions run in threads as worker processes would run them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.utils import timezone

from apps.gateway.models import TopicEvent
from apps.sessions.models import Message, Session
from apps.sessions.selectors import waiting_for_turn
from apps.turns.models import Turn, TurnStatus


def complete_turn(session: Session, message: Message | None = None) -> Turn:
    """A turn of the session that has just completed (the worker's end state), started by
    ``message`` (which gets the turn, as ``start_turn`` does; the turn created with it,
    pending, when it has one: ``message_send``)."""
    now = timezone.now()
    if message is not None and message.turn_id is not None:
        Turn.objects.filter(pk=message.turn_id).update(
            status=TurnStatus.COMPLETED, started_at=now, completed_at=now)
        Session.objects.filter(pk=session.pk).update(status="idle")
        return Turn.objects.get(pk=message.turn_id)
    turn = Turn.objects.create(session=session, user_id=session.user_id,
                               status=TurnStatus.COMPLETED, trigger_message=message,
                               started_at=now, completed_at=now)
    if message is not None:
        Message.objects.filter(pk=message.pk).update(turn=turn)
    return turn


def waiting(session: Session) -> Any:
    """The session's messages whose turn has not started (``waiting_for_turn``)."""
    return waiting_for_turn(Message.objects.filter(session=session))


def updates_of(user: Any, entity: str) -> list[dict[str, Any]]:
    """The ``entity`` items of the user's topic, in offset order: ``(action, data)``."""
    out = []
    for row in TopicEvent.objects.filter(user=user).order_by("offset"):
        for it, data in zip(row.data.get("items", []), row.data.get("data_list", []),
                            strict=True):
            if it["entity"] == entity:
                out.append({"action": it["action"], **data})
    return out


def until(cond: Callable[[], Any], within: float = 30.0) -> Any:
    deadline = time.monotonic() + within
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)
    return value


class Threads:
    """Functions run in daemon threads, each with its own database connection, until ``stop``
    (the end of a worker process, as far as the test can tell). ``every``: call ``fn`` again
    and again with that pause; without it ``fn`` runs once (a loop of its own, ended by one of
    the ``stopping_hooks``)."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.stopping_hooks: list[Callable[[], Any]] = []
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start(self, fn: Callable[[], Any], *, every: float | None = None) -> None:
        def run() -> None:
            try:
                if every is None:
                    fn()
                    return
                while not self.stopping.is_set():
                    fn()
                    self.stopping.wait(every)
            except BaseException as exc:  # surfaced by stop()
                self.errors.append(exc)
            finally:
                connection.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        for hook in self.stopping_hooks:
            hook()
        for thread in self.threads:
            thread.join(30)
            assert not thread.is_alive()
        assert not self.errors, self.errors
