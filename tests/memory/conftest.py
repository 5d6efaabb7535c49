"""Memory fixtures: users, sessions, memories written the way the app writes them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from apps.accounts.tokens import issue_access_token
from apps.memory.models import SessionMemory, UserMemory
from apps.sessions.models import Message, Session


@pytest.fixture
def make_session() -> Callable[..., Session]:
    def make(user: Any, **fields: Any) -> Session:
        return Session.objects.create(user=user, **fields)

    return make


@pytest.fixture
def remember() -> Callable[..., UserMemory]:
    """A user memory; ``age`` (seconds) sets its created/updated times in the past."""

    def make(user: Any, content: str, *, category: str = "project",
             importance: str = "medium", age: float = 0.0, **fields: Any) -> UserMemory:
        m = UserMemory.objects.create(user=user, content=content, category=category,
                                      importance=importance, **fields)
        if age:
            at = timezone.now() - timedelta(seconds=age)
            UserMemory.objects.filter(pk=m.pk).update(created_at=at, updated_at=at)
            m.refresh_from_db()
        return m

    return make


@pytest.fixture
def note() -> Callable[..., SessionMemory]:
    def make(session: Session, content: str, *, category: str = "decision",
             tokens: int | None = None) -> SessionMemory:
        from apps.turns.tokens import count_text

        return SessionMemory.objects.create(
            session=session, user_id=session.user_id, category=category, content=content,
            tokens=count_text(content) if tokens is None else tokens,
        )

    return make


@pytest.fixture
def say() -> Callable[..., Message]:
    """Append a message to a session (the next offset), as the runner stores them."""

    def make(session: Session, role: str, kind: str, data: Any) -> Message:
        offset = (Message.objects.filter(session=session).order_by("-global_offset")
                  .values_list("global_offset", flat=True).first() or 0) + 1
        Session.objects.filter(pk=session.pk).update(last_message_offset=offset)
        return Message.objects.create(session=session, user_id=session.user_id,
                                      global_offset=offset, role=role,
                                      content={"type": kind, "data": data})

    return make


@pytest.fixture
def api() -> Callable[[Any], Client]:
    """An HTTP client carrying the user's Bearer token."""

    def make(user: Any) -> Client:
        return Client(headers={"authorization": f"Bearer {issue_access_token(user)}"})

    return make
