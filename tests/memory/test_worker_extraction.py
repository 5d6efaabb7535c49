"""The worker runs extractions between sessions and gives way to turns.

A real ``Worker`` runs in a thread of the test (real database, Redis and scripted model): its
turn queues an extraction, the extraction's call starts once the worker is idle, and a message
sent meanwhile cancels it (the model sees the client go away) so the turn's request is served
at once; the extraction then runs again, after the turn, and covers both turns."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from apps.memory import jobs
from apps.memory.models import SessionMemory
from apps.sessions.services import message_send
from apps.turns.llm import OpenAIChat
from apps.turns.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)

EXTRACTED = {"tool_calls": [{"name": "save_session_memories", "arguments": {
    "context": ["The user asks two questions"]}}]}


def _until(cond: Callable[[], Any], within: float = 20.0) -> Any:
    deadline = time.monotonic() + within
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)
    return value


@pytest.fixture
def worker(model) -> Iterator[Worker]:
    w = Worker(llm_factory=lambda: OpenAIChat(api_key="sk-test-key", base_url=model.base_url,
                                              model="scripted-model", max_attempts=1),
               lease_ms=5000)

    def run() -> None:
        try:
            w.run()
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield w
    w.stopping.set()
    thread.join(20)
    assert not thread.is_alive()


def _is_extraction(request: Any) -> bool:
    return any(t["function"]["name"] == "save_session_memories"
               for t in request.body.get("tools") or [])


def test_an_extraction_gives_way_to_a_turn_and_runs_after_it(make_user, model, settings,
                                                            worker) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MEMORY_EXTRACT_INIT_TOKENS": 1,
                         "MEMORY_EXTRACT_GROWTH_TOKENS": 1}
    # The first extraction streams slowly (it would take 20 s); the second answers at once.
    model.add_rule({"tool_offered": "save_session_memories"},
                   {"content": "z" * 400, "chunk_size": 1, "chunk_delay": 0.05}, times=1)
    model.add_rule({"tool_offered": "save_session_memories"}, EXTRACTED)
    model.enqueue({"content": "First answer."})
    model.enqueue({"content": "Second answer."})
    user = make_user()
    first = message_send(user_id=user.id, device_id="", client_id="c-1",
                         content={"type": "user_message", "data": {"text": "first question"}})
    # The turn ends, the extraction is queued and starts streaming.
    _until(lambda: len(model.requests) >= 2 and model.requests[1].body["messages"])
    assert not _is_extraction(model.requests[0]) and _is_extraction(model.requests[1])
    message_send(user_id=user.id, device_id="", client_id="c-2",
                 server_session_id=first.session.id,
                 content={"type": "user_message", "data": {"text": "second question"}})
    requests = model.wait_for_requests(4, timeout=30)
    assert [_is_extraction(r) for r in requests[:4]] == [False, True, False, True]
    assert requests[1].outcome == "client_closed"  # cancelled for the turn, not finished
    turn = requests[2].body["messages"]
    assert any("second question" in str(m.get("content")) for m in turn)
    final = requests[3].body["messages"][1]["content"]
    assert "## user\nfirst question" in final and "## user\nsecond question" in final
    assert "## assistant\nSecond answer." in final
    notes = _until(lambda: list(SessionMemory.objects.values_list("content", "source")))
    assert notes == [("The user asks two questions", "extraction")]
    assert jobs.pending() == [] and jobs.running() == []
