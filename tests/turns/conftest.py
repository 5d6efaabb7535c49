"""Engine end-to-end fixtures: the gateway, the scripted model and worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rtcagent.devtools.scripted_llm import ScriptedLLM
from tests.gateway.conftest import gateway  # noqa: F401 - re-exported fixture
from tests.turns.stack import Workers


@pytest.fixture(scope="module")
def pool(
    gateway: Any, llm: ScriptedLLM, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
) -> Iterator[Workers]:
    """Two workers shared by a module's tests (they survive the per-test flushes)."""
    workers = Workers(tmp_path_factory.mktemp("workers"), llm.base_url)
    workers.start(2)
    yield workers
    workers.stop()


@pytest.fixture
def make_workers(llm: ScriptedLLM, tmp_path: Any) -> Iterator[Any]:
    """Workers of this test only, with extra environment (killed at the end)."""
    made: list[Workers] = []

    def make(count: int = 1, *, turns: int | None = None, **env: str) -> Workers:
        workers = Workers(tmp_path / f"w{len(made)}", env.pop("base_url", llm.base_url), env,
                          turns=turns)
        workers.log_dir.mkdir()
        workers.start(count)
        made.append(workers)
        return workers

    yield make
    for workers in made:
        workers.kill()
