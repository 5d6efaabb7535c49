"""Goal, loop and todo fixtures: a session, tool contexts, an operator, threads."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.test import Client

from apps.sessions.models import Session
from apps.turns.server_tools import ToolContext
from tests.sessions.factories import make_session
from tests.tasks.helpers import Threads


@pytest.fixture
def session(make_user) -> Session:
    return make_session(make_user())


@pytest.fixture
def ctx() -> Callable[[Session], ToolContext]:
    """The context of a server tool called from a turn of ``session``."""

    def make(session: Session) -> ToolContext:
        return ToolContext(user_id=session.user_id, session_id=str(session.id), turn_id="t")

    return make


@pytest.fixture
def staff(make_user) -> Client:
    client = Client()
    client.force_login(make_user(is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def threads() -> Iterator[Callable[[], Threads]]:
    made: list[Threads] = []

    def make() -> Threads:
        made.append(Threads())
        return made[-1]

    yield make
    for t in made:
        if not t.stopping.is_set():
            t.stop()
