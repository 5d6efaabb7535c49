"""The interrupt signal (``apps.live.interrupts``) for every turn: ``v1.turn.stop`` ends a
stream at once, even while the model is silent between chunks, where the stop flag alone
would only be read when the next chunk arrives."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from tests.turns.stack import Browser

pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_a_stop_cuts_a_silent_stream_at_once(gateway, model, make_workers,
                                                   make_user) -> None:
    make_workers(1)
    # 30 s before each piece: the stop flag alone would be read only when one arrives
    model.add_rule({"last_user_contains": "ponder"},
                   {"content": "Hmm... and then a long silence", "chunk_size": 6,
                    "chunk_delay": 30})
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        sid = (await tab.send("ponder this"))["result"]["session_id"]
        await tab.until(lambda: any(r.body["messages"][-1].get("content") == "ponder this"
                                    for r in model.requests))
        await asyncio.sleep(0.5)  # the model is silent now
        loop = asyncio.get_running_loop()
        asked = loop.time()
        await tab.rpc("v1.turn.stop", {"session_id": sid})
        await tab.turn_status(sid, "cancelled", within=20)
        took = loop.time() - asked
    assert took < 10, took  # far less than the 30 s the next piece would take
    (req,) = [r for r in model.requests if r.body["messages"][-1].get("content") == "ponder this"]
    assert req.outcome == "client_closed"
