"""Pruned topic history: clients that far behind are told recovered: false and reload."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from apps.gateway import livebus, recovery, stream
from apps.gateway.events import item, publish_update
from apps.gateway.models import TopicEvent

pytestmark = [pytest.mark.django_db(transaction=True)]


def _publish(user_id: int, count: int) -> None:
    for i in range(count):
        with transaction.atomic():
            publish_update(user_id=user_id, items=[item("session", "updated", i)], data_list=[])
    livebus.sync()  # their offsets settled (with their bells)


def test_prune_drops_old_rows_and_recovery_then_refuses(make_user) -> None:
    user = make_user()
    _publish(user.id, 6)
    epoch = stream.position(user.id).epoch
    TopicEvent.objects.filter(user=user, offset__lte=3).update(
        created_at=timezone.now() - timedelta(hours=100)
    )
    assert stream.prune(older_than=72 * 3600) == 3
    assert list(TopicEvent.objects.filter(user=user).values_list("offset", flat=True)
                .order_by("offset")) == [4, 5, 6]
    behind = recovery.topic_start(user.id, {"recover": True, "offset": 1, "epoch": epoch})
    assert behind.was_recovering and not behind.recovered and behind.publications == []
    assert behind.last == 6
    recent = recovery.topic_start(user.id, {"recover": True, "offset": 4, "epoch": epoch})
    assert recent.recovered
    assert [p["offset"] for p in recent.publications] == [5, 6]
