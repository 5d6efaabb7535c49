"""The one validator every prompt passes before it is sent: pairs whole, orphans dropped and
logged as the bug they are."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from apps.turns.prompt import validate, violations

SYSTEM = {"role": "system", "content": "sys"}
USER = {"role": "user", "content": "hi"}


def calls(*ids: str, content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "read", "arguments": "{}"}}
        for i in ids]}


def result(call_id: str, text: str = "out") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def test_a_whole_prompt_is_sent_as_it_is(caplog: pytest.LogCaptureFixture) -> None:
    messages = [SYSTEM, USER, calls("a", "b", content="Looking."), result("b"), result("a"),
                {"role": "assistant", "content": "Done."}, USER]

    assert validate(messages) is messages
    assert violations(messages) == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_call_without_its_result_is_dropped_and_logged(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    messages = [SYSTEM, USER, calls("a", content="Looking."), USER]

    with caplog.at_level(logging.ERROR, logger="apps.turns.engine"):
        sent = validate(messages)

    assert sent == [SYSTEM, USER, {"role": "assistant", "content": "Looking."}, USER]
    assert violations(messages) == ["calls ['a'] at 2 have no result"]
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and "a bug" in record.getMessage()


def test_a_result_without_its_call_is_dropped() -> None:
    messages = [SYSTEM, USER, result("x"), {"role": "assistant", "content": "ok"}]

    assert validate(messages) == [SYSTEM, USER, {"role": "assistant", "content": "ok"}]
    assert violations(messages) == ["result 'x' at 2 answers no call"]


def test_only_the_answered_calls_of_an_answer_are_kept() -> None:
    messages = [USER, calls("a", "b"), result("a", "A")]

    assert validate(messages) == [USER, calls("a"), result("a", "A")]


def test_a_result_after_another_message_answers_nothing() -> None:
    messages = [USER, calls("a"), USER, result("a")]

    assert validate(messages) == [USER, USER]
    assert violations(messages) == ["calls ['a'] at 1 have no result",
                                    "result 'a' at 3 answers no call"]


def test_repeated_results_and_calls_keep_the_first() -> None:
    doubled = calls("a", "a")
    messages = [USER, doubled, result("a", "first"), result("a", "second")]

    assert validate(messages) == [USER, calls("a"), result("a", "first")]
    assert violations(messages) == ["call 'a' at 1 appears twice",
                                    "result 'a' at 3 repeats an answer"]


def test_an_answer_left_with_nothing_is_dropped() -> None:
    assert validate([USER, calls("a"), {"role": "assistant", "content": None}]) == [USER]
