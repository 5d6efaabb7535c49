"""RTC state machine (forward only) and the one-RTC-per-tool-call constraint."""

from __future__ import annotations

import itertools

import pytest
from django.db import IntegrityError, transaction

from apps.rtc.models import RTC_TRANSITIONS, Rtc, RtcStatus
from apps.rtc.services import rtc_transition
from rtcagent.errors import InvalidState, NotFound
from tests.sessions.factories import make_message, make_rtc, make_session, make_turn

pytestmark = pytest.mark.django_db

ORDER = ["pending", "sent", "executing", "completed", "failed", "timeout", "rejected"]
TERMINAL = {"completed", "failed", "timeout", "rejected"}
PAIRS = list(itertools.product(RtcStatus.values, repeat=2))
LEGAL = [(a, b) for a, b in PAIRS if b in RTC_TRANSITIONS[a]]
ILLEGAL = [(a, b) for a, b in PAIRS if b not in RTC_TRANSITIONS[a]]


def test_rtc_statuses_only_move_forward():
    for start, to in LEGAL:
        assert start not in TERMINAL
        assert ORDER.index(to) > ORDER.index(start)
    for start, to in ILLEGAL:
        assert start in TERMINAL or ORDER.index(to) <= ORDER.index(start)


@pytest.fixture
def turn(make_user):
    return make_turn(make_session(make_user()), status="interrupted")


@pytest.mark.parametrize(("start", "to"), LEGAL)
def test_rtc_transition_legal_moves(turn, start, to):
    rtc = make_rtc(turn, status=start)
    moved = rtc_transition(rtc_id=rtc.id, to=to)
    assert moved.status == to
    assert Rtc.objects.get(pk=rtc.pk).status == to


@pytest.mark.parametrize(("start", "to"), ILLEGAL)
def test_rtc_transition_illegal_moves_change_nothing(turn, start, to):
    rtc = make_rtc(turn, status=start)
    with pytest.raises(InvalidState):
        rtc_transition(rtc_id=rtc.id, to=to, values={"result": {"x": 1}, "client_id": "c"})
    row = Rtc.objects.get(pk=rtc.pk)
    assert (row.status, row.result, row.client_id) == (start, None, "")
    assert (row.updated_at, row.completed_at) == (rtc.updated_at, None)


def test_rtc_result_is_applied_once(turn):
    rtc = make_rtc(turn, status="executing")
    rtc_transition(rtc_id=rtc.id, to="completed", values={"result": "one", "client_id": "a"})
    with pytest.raises(InvalidState):
        rtc_transition(rtc_id=rtc.id, to="failed", values={"result": "two", "client_id": "b"})
    row = Rtc.objects.get(pk=rtc.pk)
    assert (row.status, row.result, row.client_id) == ("completed", "one", "a")


def test_rtc_transition_stamps_times(turn):
    rtc = make_rtc(turn)
    sent = rtc_transition(rtc_id=rtc.id, to="sent")
    executing = rtc_transition(rtc_id=rtc.id, to="executing")
    done = rtc_transition(rtc_id=rtc.id, to="rejected", values={"error_message": "no"})
    assert sent.sent_at is not None and sent.started_at is None
    assert executing.started_at is not None and executing.sent_at == sent.sent_at
    assert done.completed_at is not None and done.error_message == "no"


def test_rtc_transition_of_another_user_is_not_found(turn, make_user):
    rtc = make_rtc(turn)
    with pytest.raises(NotFound) as err:
        rtc_transition(rtc_id=rtc.id, to="sent", user_id=make_user().pk)
    assert err.value.slug == "rtc.not_found"
    assert Rtc.objects.get(pk=rtc.pk).status == "pending"


def test_one_rtc_per_tool_call_message(turn):
    """A call message has one RTC; a call id may recur (models reuse "call_0" per answer)."""
    first = make_message(turn.session, text="", role="assistant", turn=turn)
    second = make_message(turn.session, text="", role="assistant", turn=turn)
    make_rtc(turn, tool_call_id="call_0", message=first)
    make_rtc(turn, tool_call_id="call_0", message=second)  # a later answer, the same id
    with pytest.raises(IntegrityError), transaction.atomic():
        make_rtc(turn, tool_call_id="call_0", message=first)
    assert Rtc.objects.filter(turn=turn).count() == 2


@pytest.mark.django_db(transaction=True)
def test_racing_results_apply_exactly_one(make_user):
    import threading

    from django.db import connection

    rtc = make_rtc(make_turn(make_session(make_user()), status="interrupted"), status="executing")
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def submit(to: str, client_id: str) -> None:
        try:
            barrier.wait()
            rtc_transition(rtc_id=rtc.id, to=to, values={"client_id": client_id, "result": to})
            outcomes.append("ok")
        except InvalidState:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [
        threading.Thread(target=submit, args=(to, f"c{i}"))
        for i, to in enumerate(["completed", "failed", "completed", "timeout"])
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok", "refused", "refused", "refused"]
    row = Rtc.objects.get(pk=rtc.pk)
    assert row.status in TERMINAL and row.result == row.status
