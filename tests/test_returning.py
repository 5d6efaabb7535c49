"""``rtcagent.returning.update_returning`` against the real database: the rows it returns are
the rows a ``SELECT`` after the update reads, field by field and type by type."""

from __future__ import annotations

import pytest
from django.db.models import F
from django.utils import timezone

from apps.sessions.models import Session, SessionStatus
from rtcagent.returning import update_returning

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

