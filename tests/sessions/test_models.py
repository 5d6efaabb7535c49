"""Session state machine, message constraints and offset allocation."""

from __future__ import annotations

import itertools

import pytest
from django.db import IntegrityError, transaction

from apps.sessions.models import SESSION_TRANSITIONS, Message, Session, SessionStatus
from apps.sessions.services import session_allocate_offsets, session_transition
from rtcagent.errors import InvalidState, NotFound
from tests.sessions.factories import make_message, make_session

pytestmark = pytest.mark.django_db

PAIRS = list(itertools.product(SessionStatus.values, repeat=2))
LEGAL = [(a, b) for a, b in PAIRS if b in SESSION_TRANSITIONS[a]]
ILLEGAL = [(a, b) for a, b in PAIRS if b not in SESSION_TRANSITIONS[a]]


def test_session_transition_table_is_the_documented_one():
    assert set(LEGAL) == {
        ("active", "idle"),
        ("active", "closed"),
        ("idle", "active"),
        ("idle", "closed"),
        ("closed", "idle"),
    }


@pytest.mark.parametrize(("start", "to"), LEGAL)
def test_session_transition_legal_moves(make_user, start, to):
    session = make_session(make_user(), status=start)
    moved = session_transition(session_id=session.id, to=to)
    assert moved.status == to
    assert Session.objects.get(pk=session.pk).status == to
    assert moved.updated_at > session.updated_at


@pytest.mark.parametrize(("start", "to"), ILLEGAL)
def test_session_transition_illegal_moves_change_nothing(make_user, start, to):
    session = make_session(make_user(), status=start)
    with pytest.raises(InvalidState) as err:
        session_transition(session_id=session.id, to=to)
    assert err.value.details == {"status": start, "to": to}
    row = Session.objects.get(pk=session.pk)
    assert (row.status, row.updated_at, row.closed_at) == (start, session.updated_at, None)


def test_session_close_stamps_closed_at_and_reopen_clears_it(make_user):
    session = make_session(make_user())
    closed = session_transition(session_id=session.id, to="closed")
    assert closed.closed_at is not None
    reopened = session_transition(session_id=session.id, to="idle")
    assert reopened.closed_at is None


def test_session_transition_scoped_to_owner_is_not_found_for_others(make_user):
    owner, other = make_user(), make_user()
    session = make_session(owner)
    with pytest.raises(NotFound) as err:
        session_transition(session_id=session.id, to="closed", user_id=other.pk)
    assert err.value.slug == "session.not_found"
    assert Session.objects.get(pk=session.pk).status == "idle"


def test_session_transition_ignores_soft_deleted_sessions(make_user):
    from django.utils import timezone

    session = make_session(make_user(), deleted_at=timezone.now())
    with pytest.raises(NotFound):
        session_transition(session_id=session.id, to="closed")
    assert Session.objects.get(pk=session.pk).status == "idle"


def test_offsets_are_allocated_consecutively_from_one(make_user):
    session = make_session(make_user())
    assert session_allocate_offsets(session_id=session.id) == 1
    assert session_allocate_offsets(session_id=session.id, count=3) == 2
    assert session_allocate_offsets(session_id=session.id) == 5
    assert Session.objects.get(pk=session.pk).last_message_offset == 5


def test_offsets_of_a_missing_session_are_not_found():
    import uuid

    with pytest.raises(NotFound):
        session_allocate_offsets(session_id=uuid.uuid4())


def test_message_offset_is_unique_per_session(make_user):
    user = make_user()
    first, second = make_session(user), make_session(user)
    make_message(first)
    Message.objects.create(session=second, user=user, global_offset=1, role="user")
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(session=first, user=user, global_offset=1, role="user")
    assert Message.objects.filter(session=first).count() == 1


def test_message_client_id_is_unique_per_user(make_user):
    alice, bob = make_user(), make_user()
    session = make_session(alice)
    make_message(session, client_id="c-1")
    make_message(make_session(bob), client_id="c-1")  # another user may reuse it
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(
            session=make_session(alice), user=alice, global_offset=1, role="user", client_id="c-1"
        )
    assert Message.objects.filter(user=alice, client_id="c-1").count() == 1


def test_empty_message_client_ids_do_not_collide(make_user):
    session = make_session(make_user())
    make_message(session, client_id="")
    make_message(session, client_id="")
    assert Message.objects.filter(session=session, client_id="").count() == 2


def test_session_transition_only_from_narrows_the_predecessors(make_user):
    session = make_session(make_user(), status="active")
    with pytest.raises(InvalidState):
        session_transition(session_id=session.id, to="idle", only_from=("closed",))
    assert Session.objects.get(pk=session.pk).status == "active"
