"""Recovery and history are bounded in bytes as well as in count: a connect reply or a history
page is one WebSocket message, and a too-large one would fail to send on every reconnect."""

from __future__ import annotations

import pytest
from django.db import transaction

from apps.gateway import livebus, recovery, stream
from apps.gateway.events import item, publish_update

pytestmark = [pytest.mark.django_db(transaction=True)]


def _publish(user_id: int, count: int, size: int) -> None:
    for i in range(count):
        with transaction.atomic():
            publish_update(user_id=user_id, items=[item("message", "updated", i)],
                           data_list=[{"text": "x" * size}])
    livebus.sync()  # their offsets settled: the watermark is past them


def test_a_recovery_larger_than_the_byte_cap_asks_the_client_to_reload(
    make_user, settings
) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "RECOVERY_MAX_BYTES": 10_000}
    user = make_user()
    _publish(user.id, 6, 3000)  # about 18 kB after offset 0
    epoch = stream.position(user.id).epoch
    whole = recovery.topic_start(user.id, {"recover": True, "offset": 0, "epoch": epoch})
    assert whole.was_recovering and not whole.recovered and whole.publications == []
    assert whole.last == 6
    tail = recovery.topic_start(user.id, {"recover": True, "offset": 4, "epoch": epoch})
    assert tail.recovered and [p["offset"] for p in tail.publications] == [5, 6]


def test_a_history_page_stops_at_the_byte_cap_and_continues(make_user, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "RECOVERY_MAX_BYTES": 10_000}
    user = make_user()
    _publish(user.id, 6, 3000)
    epoch = stream.position(user.id).epoch
    seen: list[int] = []
    after = 0
    while len(seen) < 6:
        page = recovery.history(user.id, since=(after, epoch), limit=100)
        offsets = [p["offset"] for p in page["publications"]]
        assert 1 <= len(offsets) <= 3
        seen += offsets
        after = offsets[-1]
    assert seen == [1, 2, 3, 4, 5, 6]
