"""Turn state machine and the one-active-turn-per-session constraint."""

from __future__ import annotations

import itertools
import uuid

import pytest
from django.db import IntegrityError, transaction

from apps.turns.models import ACTIVE_TURN_STATUSES, TURN_TRANSITIONS, Turn, TurnStatus
from apps.turns.services import turn_transition
from rtcagent.errors import InvalidState, NotFound
from tests.sessions.factories import make_session, make_turn

pytestmark = pytest.mark.django_db

PAIRS = list(itertools.product(TurnStatus.values, repeat=2))
LEGAL = [(a, b) for a, b in PAIRS if b in TURN_TRANSITIONS[a]]
ILLEGAL = [(a, b) for a, b in PAIRS if b not in TURN_TRANSITIONS[a]]
TERMINAL = ("completed", "failed", "cancelled", "merged")


def test_terminal_turn_statuses_have_no_way_out():
    assert all(not TURN_TRANSITIONS[s] for s in TERMINAL)
    assert {a for a, _ in LEGAL} == {"pending", "running", "interrupted"}


@pytest.mark.parametrize(("start", "to"), LEGAL)
def test_turn_transition_legal_moves(make_user, start, to):
    turn = make_turn(make_session(make_user()), status=start)
    moved = turn_transition(turn_id=turn.id, to=to)
    assert moved.status == to
    assert Turn.objects.get(pk=turn.pk).status == to


@pytest.mark.parametrize(("start", "to"), ILLEGAL)
def test_turn_transition_illegal_moves_change_nothing(make_user, start, to):
    turn = make_turn(make_session(make_user()), status=start)
    with pytest.raises(InvalidState) as err:
        turn_transition(turn_id=turn.id, to=to, values={"error_message": "x"})
    assert err.value.slug == "invalid_state"
    row = Turn.objects.get(pk=turn.pk)
    assert (row.status, row.error_message, row.updated_at) == (start, "", turn.updated_at)
    assert (row.started_at, row.completed_at) == (None, None)


def test_turn_running_stamps_started_at_once(make_user):
    turn = make_turn(make_session(make_user()))
    first = turn_transition(turn_id=turn.id, to="running").started_at
    turn_transition(turn_id=turn.id, to="interrupted")
    again = turn_transition(turn_id=turn.id, to="running")
    assert first is not None
    assert again.started_at == first
    assert again.completed_at is None


def test_turn_terminal_status_stamps_completed_at_and_values(make_user):
    turn = make_turn(make_session(make_user()), status="running")
    done = turn_transition(turn_id=turn.id, to="failed", values={"error_message": "boom"})
    assert done.completed_at is not None
    assert done.error_message == "boom"


def test_turn_transition_of_another_user_is_not_found(make_user):
    turn = make_turn(make_session(make_user()))
    with pytest.raises(NotFound) as err:
        turn_transition(turn_id=turn.id, to="running", user_id=make_user().pk)
    assert err.value.slug == "turn.not_found"
    assert Turn.objects.get(pk=turn.pk).status == "pending"


def test_turn_transition_of_a_missing_turn_is_not_found():
    with pytest.raises(NotFound):
        turn_transition(turn_id=uuid.uuid4(), to="running")


@pytest.mark.parametrize("first", [s.value for s in ACTIVE_TURN_STATUSES])
@pytest.mark.parametrize("second", [s.value for s in ACTIVE_TURN_STATUSES])
def test_one_active_turn_per_session(make_user, first, second):
    session = make_session(make_user())
    make_turn(session, status=first)
    with pytest.raises(IntegrityError), transaction.atomic():
        make_turn(session, status=second)
    assert Turn.objects.filter(session=session).count() == 1


def test_finished_turns_do_not_block_a_new_active_one(make_user):
    session = make_session(make_user())
    for status in TERMINAL:
        make_turn(session, status=status)
    make_turn(session, status="pending")
    make_turn(make_session(session.user), status="running")  # other sessions are independent
    assert Turn.objects.filter(session=session).count() == 5
