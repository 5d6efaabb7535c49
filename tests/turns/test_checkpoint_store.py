"""The checkpoint's PostgreSQL half (``state.checkpoint_store`` and ``checkpoint_store_first``,
one hand-written upsert each) against the real database."""

from __future__ import annotations

import pytest

from apps.sessions.models import Session
from apps.turns import state
from apps.turns.models import Turn, TurnCheckpoint

pytestmark = pytest.mark.django_db


def test_store_replaces_and_store_first_keeps_what_is_there(make_user) -> None:
    user = make_user()
    turn = Turn.objects.create(session=Session.objects.create(user=user), user=user)
    tid = str(turn.id)
    state.checkpoint_store_first(tid, {"step": 0, "transcript": []})
    first = TurnCheckpoint.objects.get(turn_id=turn.id)
    assert first.data == {"step": 0, "transcript": []}

    big = {"step": 2, "transcript": [{"role": "tool", "content": "é\u2028" * 1000}]}
    state.checkpoint_store(tid, big)
    stored = TurnCheckpoint.objects.get(turn_id=turn.id)
    assert stored.data == big and stored.saved_at >= first.saved_at

    state.checkpoint_store_first(tid, {"step": 0, "transcript": []})  # one is there: kept
    assert TurnCheckpoint.objects.get(turn_id=turn.id).data == big
    assert TurnCheckpoint.objects.count() == 1
