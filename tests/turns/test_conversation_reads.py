"""``conversation.load`` after a compaction reads only what the summary keeps, and builds the
same conversation as reading every message of the session.

Sessions are drawn by Hypothesis and written as rows: turns with a trigger, answers (text,
tool calls with their results), messages sent while a turn ran (lower offsets than its
answers), live inputs a turn took in (lower offsets than its trigger), deleted messages, and
summaries whose kept tail starts at a message of the session, at a deleted one, at one of
another session, or nowhere. The reduced read must give the conversation the whole read gives,
for the session and for each turn at each step.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.sessions.models import ContentType, Message, MessageRole, Session
from apps.turns import conversation
from apps.turns.models import Turn, TurnStatus

pytestmark = pytest.mark.django_db

_names = itertools.count(1)


class Builder:
    """Rows of one session at consecutive offsets, as the services would leave them."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self.session = Session.objects.create(user=user, client_session_id=f"r{next(_names)}")
        self.offset = 0
        self.messages: list[Message] = []
        self.turns: list[Turn] = []

    def add(self, role: str, content: dict[str, Any], **fields: Any) -> Message:
        self.offset += 1
        msg = Message.objects.create(session=self.session, user=self.user,
                                     global_offset=self.offset, role=role, content=content,
                                     **fields)
        self.messages.append(msg)
        return msg

    def user_message(self, text: str, **fields: Any) -> Message:
        return self.add(MessageRole.USER, {"type": ContentType.TEXT, "data": text}, **fields)

    def turn(self, trigger: Message, taken_in: list[Message]) -> Turn:
        turn = Turn.objects.create(session=self.session, user=self.user, trigger_message=trigger,
                                   status=TurnStatus.COMPLETED, completed_at=timezone.now())
        Message.objects.filter(pk__in=[trigger.pk, *(m.pk for m in taken_in)]).update(turn=turn)
        self.turns.append(turn)
        return turn

    def answer(self, turn: Turn, step: int, *, text: bool, calls: int) -> None:
        position = Message.objects.filter(turn=turn).count()
        if text:
            position += 1
            self.add(MessageRole.ASSISTANT, {"type": ContentType.MARKDOWN, "data": f"a{step}"},
                     turn=turn, turn_offset=position, client_id=f"turn:{turn.id}:{step}:markdown")
        for n in range(calls):
            call = self.add(MessageRole.ASSISTANT, {"type": ContentType.TOOLCALL_INPUT, "data": {
                "id": f"call_{n}", "tool_name": "read", "input": f'{{"path": "/{n}"}}'}},
                turn=turn, turn_offset=position + 1,
                client_id=f"turn:{turn.id}:{step + 1}:call:{n}")
            self.add(MessageRole.TOOL, {"type": ContentType.TOOLCALL_OUTPUT, "data": {
                "id": f"call_{n}", "output": f"out {step}.{n}"}},
                turn=turn, turn_offset=position + 2, parent_message=call,
                client_id=f"turn:{turn.id}:{step + 1}:result:{n}")
            position += 2

    def summary(self, keep_from: Message | None) -> Message:
        return self.add(MessageRole.SYSTEM, {"type": ContentType.SUMMARY, "data": [
            {"title": "Summary", "content": f"up to {self.offset}"}]}, parent_message=keep_from)


def _read(session_id: Any) -> list[Message]:
    """The rows ``load`` reads (not the whole session, after a compaction)."""
    return list(conversation._rows(session_id, conversation._latest_summary(session_id)))


def _shape(conv: conversation.Conversation) -> tuple[Any, ...]:
    return (conv.summary.id if conv.summary else None,
            [(b.kind, b.anchor, b.messages) for b in conv.blocks])


turn_plans = st.lists(st.tuples(
    st.integers(0, 2),  # live inputs sent before the trigger and taken into the turn
    st.integers(0, 2),  # messages sent while the turn ran (before its answers)
    st.lists(st.tuples(st.booleans(), st.integers(0, 2)), min_size=1, max_size=3),  # answers
    st.integers(0, 5),  # summaries after this turn: 0 none, 1 kept tail in the session,
    #                     2 kept tail deleted, 3 kept tail in another session (a fork),
    #                     4 no kept tail, 5 kept tail at an earlier summary
    st.integers(0, 5),  # the trigger: 0 soft-deleted afterwards, 1 removed (the turn keeps
    #                     none), 2 a turn created without one, else kept
), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=turn_plans, pick=st.randoms(use_true_random=False), deletions=st.integers(0, 3))
def test_the_reduced_read_gives_the_conversation_of_the_whole_read(
    make_user: Any, plan: list[Any], pick: Any, deletions: int
) -> None:
    user = make_user()
    other = Builder(user)
    other.offset = 10_000  # a place no message of the drawn session reaches
    elsewhere = other.user_message("in another session")
    b = Builder(user)
    for inputs, during, answers, summary, trigger in plan:
        taken = [b.user_message(f"live {i}", client_id=f"live:{next(_names)}")
                 for i in range(inputs)]
        question = b.user_message("question")
        turn = b.turn(question, taken)
        if trigger == 0:
            Message.objects.filter(pk=question.pk).update(deleted_at=timezone.now())
        elif trigger == 1:
            b.messages.remove(question)
            Message.objects.filter(pk=question.pk).delete()  # the turn's reference goes NULL
        elif trigger == 2:
            Turn.objects.filter(pk=turn.pk).update(trigger_message=None)
        for i in range(during):
            b.user_message(f"meanwhile {i}")
        for step, (text, calls) in enumerate(answers, start=1):
            b.answer(turn, step, text=text, calls=calls)
        if summary == 1:
            b.summary(pick.choice([m for m in b.messages if m.role != MessageRole.SYSTEM]))
        elif summary == 2:
            start = pick.choice(b.messages)
            b.summary(start)
            Message.objects.filter(pk=start.pk).update(deleted_at=timezone.now())
        elif summary == 3:
            b.summary(elsewhere)
        elif summary == 4:
            b.summary(None)
        elif summary == 5:
            earlier = [m for m in b.messages if m.content["type"] == ContentType.SUMMARY]
            b.summary(earlier[-1] if earlier else None)
    for msg in pick.sample(b.messages, min(deletions, len(b.messages))):
        Message.objects.filter(pk=msg.pk).update(deleted_at=timezone.now())

    session = Session.objects.get(pk=b.session.pk)
    assert _shape(conversation.load(session)) == _shape(conversation.load(session, whole=True))
    for turn in b.turns:
        for steps in range(4):
            reduced = conversation.load(session, Turn.objects.get(pk=turn.pk), turn_steps=steps)
            whole = conversation.load(session, Turn.objects.get(pk=turn.pk), turn_steps=steps,
                                      whole=True)
            assert _shape(reduced) == _shape(whole)


def test_after_a_summary_only_its_tail_and_what_followed_are_read(make_user: Any) -> None:
    b = Builder(make_user())
    for i in range(30):
        turn = b.turn(b.user_message(f"question {i}"), [])
        b.answer(turn, 1, text=True, calls=1)
    # a live input sent before the kept tail, taken in by a turn after the summary: it is
    # placed by that turn's trigger, so the summary keeps it
    late_input = b.user_message("live", client_id="live:late")
    kept = b.user_message("the first question the summary keeps")
    b.answer(b.turn(kept, []), 1, text=True, calls=1)
    b.summary(kept)
    turn = b.turn(b.user_message("after the summary"), [late_input])
    b.answer(turn, 1, text=True, calls=0)

    read = _read(b.session.id)
    assert [m.pk for m in read if m.global_offset < kept.global_offset] == [late_input.pk]
    assert len(read) == 1 + 4 + 1 + 2  # the late input, the kept turn, the summary, the last
    conv = conversation.load(b.session)
    assert conv.summary is not None and conv.summary.parent_message_id == kept.id
    assert [blk.kind for blk in conv.blocks] == ["summary", "user", "answer", "user", "user",
                                                "answer"]
    assert conv.blocks[3].messages == [{"role": "user", "content": "live"}]
    assert _shape(conv) == _shape(conversation.load(b.session, whole=True))


def test_without_a_usable_summary_every_message_is_read(make_user: Any) -> None:
    b = Builder(make_user())
    for i in range(5):
        turn = b.turn(b.user_message(f"question {i}"), [])
        b.answer(turn, 1, text=True, calls=0)
    assert len(_read(b.session.id)) == 10
    start = b.messages[6]
    b.summary(start)  # its tail start is deleted: the summary keeps every message it sees
    Message.objects.filter(pk=start.pk).update(deleted_at=timezone.now())
    assert len(_read(b.session.id)) == 10
    conv = conversation.load(b.session)
    assert conv.summary is not None
    assert [blk.kind for blk in conv.blocks].count("user") == 4  # all but the deleted one
    assert [blk.kind for blk in conv.blocks].count("answer") == 5


def test_the_summary_lookup_repeats_the_partial_index_condition() -> None:
    """The planner uses ``message_summary`` only for a query that states its condition."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite's lookup walks the offset index (conversation._IS_SUMMARY)")
    index = next(i for i in Message._meta.indexes if i.name == "message_summary")
    created = str(index.create_sql(Message, connection.schema_editor()))
    assert f"WHERE {conversation._IS_SUMMARY[connection.vendor]}" in created


def test_a_summary_deleted_between_the_two_reads_falls_back_to_every_message(
    make_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary lookup and the rows are two statements: when the kept tail's first message
    is deleted in between, ``load`` reads every message, as it would have from the start."""
    b = Builder(make_user())
    for i in range(6):
        turn = b.turn(b.user_message(f"question {i}"), [])
        b.answer(turn, 1, text=True, calls=1)
    start = b.messages[-4]
    b.summary(start)
    found = conversation._latest_summary(b.session.id)
    assert found is not None and found.start_id == start.id
    Message.objects.filter(pk=start.pk).update(deleted_at=timezone.now())
    monkeypatch.setattr(conversation, "_latest_summary", lambda session_id: found)
    stale = conversation.load(b.session)
    monkeypatch.undo()
    assert _shape(stale) == _shape(conversation.load(b.session, whole=True))
    assert [blk.kind for blk in stale.blocks].count("user") == 5  # all but the deleted one
