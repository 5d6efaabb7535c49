"""Break 1 of the hardening issue: one bad user must not stop the worker's sweep for everyone."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.gateway import stream
from apps.gateway.models import TopicEvent
from apps.rtc.models import Rtc
from apps.turns.worker import Worker
from rtcagent import keys
from rtcagent.redis import get_redis
from tests.sessions.factories import make_rtc, make_session, make_turn

pytestmark = [pytest.mark.django_db(transaction=True)]


def _age_pending(user_id: int, seconds: float = 60) -> None:
    """Make every pending allocation of the user look ``seconds`` old (past the gap grace)."""
    r = get_redis()
    now = float(r.time()[0])
    for member in r.zrange(keys.topic_pending(user_id), 0, -1):
        r.zadd(keys.topic_pending(user_id), {member: now - seconds})


def test_a_deleted_users_pending_offset_does_not_stop_the_sweep(make_user) -> None:
    gone, alive = make_user(), make_user()
    gone_id = gone.id
    stream.allocate(gone_id)  # the deleted user's socket allocated, then its insert failed
    gone.delete()
    stream.allocate(alive.id)  # a rolled-back publication of a live user: must become a gap
    session = make_session(alive)
    turn = make_turn(session, status="interrupted")
    rtc = make_rtc(turn, status="pending", deadline=timezone.now() - timedelta(seconds=5))
    _age_pending(gone_id)
    _age_pending(alive.id)

    worker = Worker()
    worker.sweep()
    worker.sweep()  # and again: nothing left behind that fails every time

    assert Rtc.objects.get(pk=rtc.pk).status == "timeout"  # deadlines still enforced
    assert TopicEvent.objects.filter(user=alive, kind=TopicEvent.Kind.GAP).count() == 1
    r = get_redis()
    assert r.zcard(keys.topic_pending(alive.id)) == 0
    assert not r.exists(keys.topic_pending(gone_id), keys.topic_epoch(gone_id))
    assert str(gone_id) not in r.smembers(keys.topic_pending_users())


def test_one_failing_step_leaves_the_others_running(make_user, monkeypatch) -> None:
    user = make_user()
    turn = make_turn(make_session(user), status="interrupted")
    rtc = make_rtc(turn, status="pending", deadline=timezone.now() - timedelta(seconds=5))

    def broken() -> int:
        raise RuntimeError("gap filler broken")

    monkeypatch.setattr(stream, "fill_all_gaps", broken)
    Worker().sweep()
    assert Rtc.objects.get(pk=rtc.pk).status == "timeout"


def test_one_failing_rtc_does_not_keep_the_others_from_timing_out(make_user, monkeypatch) -> None:
    from apps.rtc import services

    user = make_user()
    turn_a = make_turn(make_session(user), status="interrupted")
    turn_b = make_turn(make_session(user), status="interrupted")
    past = timezone.now() - timedelta(seconds=5)
    bad = make_rtc(turn_a, status="pending", deadline=past)
    good = make_rtc(turn_b, status="pending", deadline=past)
    original = services.rtc_timeout

    def flaky(*, rtc_id):  # type: ignore[no-untyped-def]
        if rtc_id == bad.id:
            raise RuntimeError("one broken row")
        return original(rtc_id=rtc_id)

    monkeypatch.setattr(services, "rtc_timeout", flaky)
    Worker().sweep()
    assert Rtc.objects.get(pk=good.pk).status == "timeout"
    assert Rtc.objects.get(pk=bad.pk).status == "pending"


def test_one_worker_of_the_deployment_sweeps_each_second(make_user) -> None:
    """Two workers' loops come due in the same second: one sweeps (an RTC past its deadline
    times out), the other skips; the next second, whichever comes first sweeps again."""
    from apps.turns import worker as worker_module

    user = make_user()
    first, second = Worker(), Worker()
    rtc = make_rtc(make_turn(make_session(user), status="interrupted"), status="pending",
                   deadline=timezone.now() - timedelta(seconds=5))
    assert first.sweep_if_due() is True
    assert Rtc.objects.get(pk=rtc.pk).status == "timeout"
    later = make_rtc(make_turn(make_session(user), status="interrupted"), status="pending",
                     deadline=timezone.now() - timedelta(seconds=5))
    assert second.sweep_if_due() is False  # swept this second already: nothing done
    assert first.sweep_if_due() is False
    assert Rtc.objects.get(pk=later.pk).status == "pending"
    get_redis().pexpire(worker_module.SWEEP_KEY, 1)  # the second is over
    time.sleep(0.01)
    assert second.sweep_if_due() is True
    assert Rtc.objects.get(pk=later.pk).status == "timeout"

