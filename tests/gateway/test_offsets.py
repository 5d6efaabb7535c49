"""Offsets stay contiguous and unique with several processes publishing at once."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from apps.gateway import stream
from apps.gateway.models import TopicEvent
from tests.livesrv import ROOT, child_env

pytestmark = [pytest.mark.django_db(transaction=True)]


def _run_publishers(user_id: int, per_process: int, rollback_every: int) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.gateway.publisher", str(user_id), str(per_process),
             str(rollback_every), f"p{n}"],
            cwd=ROOT,
            env=child_env(),
        )
        for n in range(3)
    ]
    for proc in procs:
        assert proc.wait(300) == 0


def _positions(user_id: int) -> list[tuple[int, str, dict]]:
    return list(
        TopicEvent.objects.filter(user_id=user_id)
        .order_by("offset")
        .values_list("offset", "kind", "data")
    )


def test_three_processes_publish_1000_updates_with_contiguous_offsets(make_user) -> None:
    user = make_user()
    _run_publishers(user.id, per_process=334, rollback_every=0)
    rows = _positions(user.id)
    assert [r[0] for r in rows] == list(range(1, 1003))
    assert {r[1] for r in rows} == {"update"}
    assert all(r[2]["offset"] == r[0] for r in rows)
    tags = sorted((d["data_list"][0]["tag"], d["data_list"][0]["i"]) for _, _, d in rows)
    assert tags == sorted((f"p{n}", i) for n in range(3) for i in range(334))
    assert stream.position(user.id).watermark == 1002


def test_rolled_back_allocations_become_gaps(make_user) -> None:
    user = make_user()
    _run_publishers(user.id, per_process=100, rollback_every=7)  # 14 of each 100 roll back
    before = _positions(user.id)
    assert len(before) == 3 * (100 - 14)
    assert stream.position(user.id).watermark < 300  # holes hold the watermark back

    time.sleep(0.2)
    filled = stream.fill_gaps(user.id, grace=0.1)
    assert filled == 3 * 14
    rows = _positions(user.id)
    assert [r[0] for r in rows] == list(range(1, 301))
    gaps = [r for r in rows if r[1] == "gap"]
    assert len(gaps) == 42 and all(r[2] == {} for r in gaps)
    assert stream.position(user.id).watermark == 300
    # every surviving update kept its own offset: nothing was overwritten by a gap
    assert {(r[0], r[2]["offset"]) for r in rows if r[1] == "update"} == {
        (r[0], r[0]) for r in before
    }


def test_a_gap_never_replaces_a_row_still_being_committed(make_user) -> None:
    from django.db import transaction

    user = make_user()
    with transaction.atomic():
        from apps.gateway.events import item, publish_update

        publish_update(user_id=user.id, items=[item("session", "updated", 1)], data_list=[])
        # offset 1 is allocated and inserted but not committed; an eager gap filler in another
        # process must wait for this transaction rather than claim the offset.
        filler = subprocess.Popen(
            [sys.executable, "-c",
             "import django; django.setup(); from apps.gateway import stream; "
             f"print(stream.fill_gaps({user.id}, grace=0))"],
            cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, text=True,
        )
        time.sleep(1.0)
        assert filler.poll() is None, "the filler waits on the uncommitted row"
    filler.communicate(timeout=60)
    assert filler.returncode == 0
    rows = _positions(user.id)
    assert [(r[0], r[1]) for r in rows] == [(1, "update")]


def test_an_offset_filled_before_its_row_is_skipped_and_the_transaction_goes_on(
    make_user,
) -> None:
    """A gap filler took the next offset first (its writer looked dead): the store takes a
    fresh one, inside the same transaction, which stays usable and commits both."""
    from django.db import transaction

    from apps.gateway.events import item, publish_update

    user = make_user()
    pos = stream.position(user.id)
    taken = pos.offset + 1
    TopicEvent.objects.create(user_id=user.id, epoch=pos.epoch, offset=taken,
                              kind=TopicEvent.Kind.GAP)
    with transaction.atomic():
        update = publish_update(user_id=user.id, items=[item("session", "updated", 1)],
                                data_list=[])
        assert update["offset"] == taken + 1
        assert TopicEvent.objects.filter(user_id=user.id).count() == 2  # still usable
    rows = _positions(user.id)
    assert [(offset, kind) for offset, kind, _ in rows] == [(taken, "gap"),
                                                             (taken + 1, "update")]
    assert rows[1][2]["id"] == update["id"] and rows[1][2]["offset"] == taken + 1


def test_a_batched_transaction_whose_offset_a_gap_took_stores_its_update_again(
    make_user, settings,
) -> None:
    """In a batched transaction the row goes with the COMMIT (``stream._store_at_commit``),
    so a gap that took the offset first is only found after the commit: a slow commit (here
    every one, with no grace) reads the row back, and the Update is stored again under a
    fresh offset, as the unbatched store would have retried. Nothing is lost."""
    from django.db import connection, transaction

    from apps.gateway.events import item, publish_update
    from rtcagent.rows import batched

    if connection.vendor != "postgresql":
        pytest.skip("batched transactions are PostgreSQL's")
    settings.RTCAGENT = {**getattr(settings, "RTCAGENT", {}), "GAP_GRACE": 0.0}
    user = make_user()
    pos = stream.position(user.id)
    taken = pos.offset + 1
    TopicEvent.objects.create(user_id=user.id, epoch=pos.epoch, offset=taken,
                              kind=TopicEvent.Kind.GAP)
    with batched(), transaction.atomic():
        update = publish_update(user_id=user.id, items=[item("session", "updated", 1)],
                                data_list=[])
    rows = _positions(user.id)
    assert [(offset, kind) for offset, kind, _ in rows] == [(taken, "gap"),
                                                             (taken + 1, "update")]
    assert rows[1][2]["id"] == update["id"] and rows[1][2]["offset"] == taken + 1
    assert update["offset"] == taken + 1
    assert stream.position(user.id).watermark == taken + 1  # both offsets settled


def test_a_batched_transaction_stores_its_update_with_the_commit(make_user) -> None:
    """The usual case: the row is written with the COMMIT, under its allocated offset, and
    nothing is written when the transaction rolls back (the offset becomes a hole)."""
    from django.db import connection, transaction

    from apps.gateway.events import item, publish_update
    from rtcagent.rows import batched

    user = make_user()
    with batched(), transaction.atomic():
        first = publish_update(user_id=user.id, items=[item("session", "updated", 1)],
                               data_list=[])
    with pytest.raises(RuntimeError), batched(), transaction.atomic():
        publish_update(user_id=user.id, items=[item("session", "updated", 2)], data_list=[])
        raise RuntimeError("rolled back")
    rows = _positions(user.id)
    assert [(offset, kind, data["id"]) for offset, kind, data in rows] == [
        (first["offset"], "update", first["id"])]
    assert stream.position(user.id).offset == first["offset"] + 1  # the rolled-back one's
    assert connection.vendor in ("postgresql", "sqlite")


def test_an_offset_reserved_ahead_is_used_by_its_update_or_given_back(make_user) -> None:
    """``reserve`` asks for an offset behind other commands, in one packet, and the answers
    are read later; an Update stored with it takes that offset, and one never published is
    given back at once rather than holding the user's topic until ``GAP_GRACE`` (taken back
    while it is the last one allocated, else filled with a gap), also when its answer was
    never read before the release."""
    from django.db import transaction

    from apps.gateway.events import item, publish_update
    from apps.sessions.models import Session
    from rtcagent.redis import get_redis
    from rtcagent.rows import batched

    user = make_user()
    key = f"test:reserve:{user.id}"
    reservation = stream.reserve(user.id, [("SET", key, "1", "EX", 60)])
    with batched(), transaction.atomic():
        Session.objects.filter(user_id=user.id).count()  # a statement while Redis answers
        assert reservation.replies() in (["OK"], [b"OK"], [True])
        assert get_redis().get(key) in ("1", b"1")  # the command ahead of it ran
        reserved = reservation.position()
        update = publish_update(user_id=user.id, items=[item("session", "updated", 1)],
                                data_list=[], position=reserved)
    assert update["offset"] == reserved.offset
    assert reservation.position() is reserved  # read once

    unused = stream.reserve(user.id, [("DEL", key)])
    stream.release(user.id, unused)  # never read before: release reads it
    # still the last one allocated: taken back, as if never asked for (nothing written)
    assert unused.position().offset == reserved.offset + 1
    assert get_redis().get(key) is None
    pos = stream.position(user.id)
    assert pos.watermark == pos.offset == reserved.offset
    assert [(offset, kind) for offset, kind, _ in _positions(user.id)] == [
        (reserved.offset, "update")]

    # one allocated after it: it cannot be taken back, so it is filled with a gap at once
    first, later = stream.reserve(user.id), stream.reserve(user.id)
    stream.release(user.id, first)
    assert stream.position(user.id).watermark == first.position().offset  # not held behind
    stream.release(user.id, later)  # and this one, now the last, is taken back
    pos = stream.position(user.id)
    assert pos.watermark == pos.offset == first.position().offset
    assert [(offset, kind) for offset, kind, _ in _positions(user.id)] == [
        (reserved.offset, "update"), (first.position().offset, "gap")]


def test_an_offset_older_than_half_the_gap_grace_is_filled_not_taken_back(
    make_user, settings
) -> None:
    """A gap filler may already be filling an allocation older than ``GAP_GRACE``: such an
    offset is never taken back (its number could be handed out again over the filler's row),
    even when it is the last one allocated."""
    settings.RTCAGENT = {**getattr(settings, "RTCAGENT", {}), "GAP_GRACE": 0.2}
    user = make_user()
    old = stream.reserve(user.id)
    old.position()
    time.sleep(0.15)  # past half the grace
    stream.release(user.id, old)
    pos = stream.position(user.id)
    assert pos.watermark == pos.offset == old.position().offset
    assert [(offset, kind) for offset, kind, _ in _positions(user.id)] == [
        (old.position().offset, "gap")]


def test_a_release_inside_a_callers_transaction_fills_at_its_commit(make_user) -> None:
    """A gap written by a release inside an outer transaction goes with that transaction's
    commit: rolled back, nothing of it stays and the offset is left to the gap filler."""
    from django.db import transaction

    user = make_user()
    with transaction.atomic():
        kept, after = stream.reserve(user.id), stream.reserve(user.id)
        stream.release(user.id, kept)  # not the last: a gap, at the commit
        assert not TopicEvent.objects.filter(user_id=user.id).exists()  # not yet
    assert _positions(user.id)[-1][:2] == (kept.position().offset, "gap")

    class Abandoned(Exception):
        pass

    with pytest.raises(Abandoned), transaction.atomic():
        dropped = stream.reserve(user.id)
        stream.reserve(user.id)
        stream.release(user.id, dropped)
        raise Abandoned
    assert _positions(user.id)[-1][0] == kept.position().offset  # no row for it
    pos = stream.position(user.id)
    assert pos.watermark == after.position().offset - 1  # held by ``after``, then ``dropped``
    assert pos.offset == dropped.position().offset + 1
