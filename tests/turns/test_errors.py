"""Error feedback: the per-session hourly limit and debug.show_raw_errors."""

from __future__ import annotations

import pytest

from apps.sessions.models import Message, Session
from apps.turns.llm_errors import LLMError
from apps.turns.models import Turn
from apps.turns.runner import add_error_message

pytestmark = [pytest.mark.django_db]


def _turn(user) -> Turn:
    session = Session.objects.create(user=user)
    return Turn.objects.create(session=session, user=user, status="failed")


def _error(raw: str = "upstream said: boom") -> LLMError:
    return LLMError(category="api", title="Model error", message="The model failed; retry.",
                    retryable=True, raw_error=raw)


def test_at_most_20_error_messages_per_session_per_hour(make_user) -> None:
    user = make_user()
    session_turns = [_turn(user) for _ in range(21)]
    same_session = Session.objects.get(pk=session_turns[0].session_id)
    turns = [Turn.objects.create(session=same_session, user=user, status="failed")
             for _ in range(21)]
    for turn in turns:
        add_error_message(turn, _error())
    assert Message.objects.filter(session=same_session, content__type="error").count() == 20
    other = session_turns[1]
    add_error_message(other, _error())  # another session has its own budget
    assert Message.objects.filter(session_id=other.session_id).count() == 1


def test_raw_error_is_sent_only_when_show_raw_errors_is_on(make_user, settings) -> None:
    user = make_user()
    add_error_message(_turn(user), _error())
    settings.RTCAGENT = {**settings.RTCAGENT, "SHOW_RAW_ERRORS": True}
    add_error_message(_turn(user), _error("raw detail"))
    hidden, shown = (m.content["data"] for m in
                     Message.objects.filter(content__type="error").order_by("created_at"))
    assert "raw_error" not in hidden
    assert shown["raw_error"] == "raw detail"
    assert shown["category"] == "api" and shown["retryable"] is True
