"""``stream.read_raw`` (plain SQL, used by recovery and history) returns what the ORM reads."""

from __future__ import annotations

import json

import pytest
from django.db import transaction

from apps.gateway import stream
from apps.gateway.models import TopicEvent

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_read_raw_matches_the_rows_gaps_included(make_user) -> None:
    user, other = make_user(), make_user()
    for n in range(5):
        with transaction.atomic():
            stream.store(user.id, {"n": n, "text": "ünïcode \"quoted\"", "nested": {"a": [1, n]}})
        with transaction.atomic():
            stream.store(other.id, {"n": n})
    epoch = stream.position(user.id).epoch
    TopicEvent.objects.filter(user_id=user.id, offset=3).update(kind=TopicEvent.Kind.GAP, data={})

    rows = stream.read_raw(user.id, epoch, 1, 5)
    expected = stream.read_range(user.id, epoch, 1, 5)
    assert [offset for offset, _ in rows] == [2, 3, 4, 5]
    assert [json.loads(raw) for _, raw in rows] == [e.publication() for e in expected]
    assert json.loads(rows[1][1]) == {"type": "gap", "data": {}}
    assert stream.read_raw(user.id, epoch, 0, 5, limit=2) == stream.read_raw(user.id, epoch, 0, 2)
    assert stream.read_raw(user.id, "another-epoch", 0, 5) == []
