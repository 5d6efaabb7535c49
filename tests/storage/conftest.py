"""Fixtures of the object-store tests: a real S3-protocol server (moto) for the S3 backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.storage.motoserver import MotoServer, start_moto


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """moto's S3 server in a subprocess, for the whole run; ``new_bucket()`` per test."""
    server = start_moto(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()
