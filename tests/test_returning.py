"""``rtcagent.returning`` against the real database: the rows ``update_returning`` and
``update_where_returning`` return are the rows a ``SELECT`` after the update reads, field by
field and type by type."""

from __future__ import annotations

import pytest
from django.db.models import F
from django.utils import timezone

from apps.sessions.models import Session, SessionStatus
from rtcagent.returning import IfNull, update_returning, update_where_returning

pytestmark = pytest.mark.django_db


def test_the_changed_rows_come_back_as_a_select_reads_them(make_user) -> None:
    user = make_user()
    kept = Session.objects.create(user=user, title="kept", status=SessionStatus.CLOSED)
    session = Session.objects.create(user=user, title="mine", host_functions=[{"name": "f"}],
                                     last_message_offset=4)
    rows = update_returning(
        Session.objects.filter(user=user).exclude(status=SessionStatus.CLOSED),
        status=SessionStatus.ACTIVE, updated_at=timezone.now(),
        last_message_offset=F("last_message_offset") + 1)
    assert [r.pk for r in rows] == [session.pk]
    (row,) = rows
    fresh = Session.objects.get(pk=session.pk)
    for field in Session._meta.concrete_fields:
        got, want = getattr(row, field.attname), getattr(fresh, field.attname)
        assert got == want and type(got) is type(want), field.name
    assert row.last_message_offset == 5 and row.host_functions == [{"name": "f"}]
    assert not row._state.adding  # a saved row: save() updates it
    row.title = "renamed"
    row.save(update_fields=["title"])
    assert Session.objects.get(pk=session.pk).title == "renamed"
    assert Session.objects.get(pk=kept.pk).status == SessionStatus.CLOSED  # filtered out


def test_no_matching_row_changes_nothing_and_returns_none(make_user) -> None:
    session = Session.objects.create(user=make_user(), status=SessionStatus.CLOSED)
    before = Session.objects.get(pk=session.pk).updated_at
    assert update_returning(Session.objects.filter(pk=session.pk).exclude(
        status=SessionStatus.CLOSED), title="x", updated_at=timezone.now()) == []
    assert Session.objects.get(pk=session.pk).updated_at == before



def _same_as_read(row: Session) -> None:
    fresh = Session.objects.get(pk=row.pk)
    for field in Session._meta.concrete_fields:
        got, want = getattr(row, field.attname), getattr(fresh, field.attname)
        assert got == want and type(got) is type(want), field.name


def test_the_hand_written_update_matches_the_orms(make_user) -> None:
    """Equalities, an ``IN`` list and ``IS NULL`` in the condition; plain values (JSON and
    NULL among them) and a first-time stamp set: the row comes back as a read finds it."""
    user, other = make_user(), make_user()
    session = Session.objects.create(user=user, title="mine", status=SessionStatus.IDLE)
    first = timezone.now()
    (row,) = update_where_returning(
        Session, where={"id": session.pk, "user_id": user.id, "deleted_at__isnull": True},
        where_in=("status", [SessionStatus.IDLE, SessionStatus.ACTIVE]),
        values={"status": SessionStatus.ACTIVE, "host_functions": [{"name": "f", "n": 1}],
                "closed_at": IfNull(first), "device_id": "d1"})
    _same_as_read(row)
    assert row.status == SessionStatus.ACTIVE and row.host_functions == [{"name": "f", "n": 1}]
    assert row.closed_at == first
    # a first-time stamp is kept by a later move; a plain NULL clears
    (again,) = update_where_returning(
        Session, where={"id": session.pk}, where_in=("status", [SessionStatus.ACTIVE]),
        values={"closed_at": IfNull(timezone.now()), "device_id": "", "title": "t"})
    _same_as_read(again)
    assert again.closed_at == first and again.device_id == ""
    (cleared,) = update_where_returning(
        Session, where={"id": session.pk}, where_in=("status", [SessionStatus.ACTIVE]),
        values={"closed_at": None})
    _same_as_read(cleared)
    assert cleared.closed_at is None
    # outside the condition (another owner, a status not listed, a deleted row): nothing
    assert update_where_returning(
        Session, where={"id": session.pk, "user_id": other.id}, where_in=("status", ["active"]),
        values={"title": "x"}) == []
    assert update_where_returning(
        Session, where={"id": session.pk}, where_in=("status", ["closed"]),
        values={"title": "x"}) == []
    Session.objects.filter(pk=session.pk).update(deleted_at=timezone.now())
    assert update_where_returning(
        Session, where={"id": session.pk, "deleted_at__isnull": True},
        where_in=("status", ["active"]), values={"title": "x"}) == []
    assert Session.objects.get(pk=session.pk).title == "t"


def test_shapes_it_does_not_write_are_left_to_the_orm(make_user) -> None:
    session = Session.objects.create(user=make_user())
    for where, values in (({"id": session.pk}, {"last_message_offset": F("last_message_offset")}),
                          ({"id": session.pk, "title__startswith": "x"}, {"title": "y"}),
                          ({"id": session.pk, "deleted_at__isnull": False}, {"title": "y"}),
                          ({"id": session.pk}, {"no_such_field": 1})):
        assert update_where_returning(Session, where=where, where_in=("status", ["idle"]),
                                      values=values) is None
    assert update_where_returning(Session, where={"id": session.pk}, where_in=("status", []),
                                  values={"title": "y"}) is None
    assert Session.objects.get(pk=session.pk).title != "y"
