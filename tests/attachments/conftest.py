"""Attachment fixtures: the configured object store (the local folder of the test run) and the
image pool of this process, shut down when the tests are done."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session", autouse=True)
def _image_pool() -> Iterator[None]:
    yield
    from apps.attachments.pool import shutdown_pool

    shutdown_pool()


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    from apps.attachments.cache import data_urls

    data_urls.clear()


@pytest.fixture
def store() -> Any:
    """The configured store, emptied first when it is the local folder (this xdist process's
    own, which its live servers share): object keys carry user ids, and on SQLite (``make
    test`` on a fresh machine) a test's rolled-back users give their ids to the next test's,
    which would then see the earlier test's objects."""
    from django.conf import settings

    from apps.storage.store import get_store

    config = settings.RTC_OBJECT_STORE
    root = Path(config.get("ROOT") or "")
    # only the test run's own folder (rtcagent/settings.py, tests/parallel.py), never one the
    # environment named; the objects only (``keys/``), not the store's own files
    if config.get("BACKEND") == "local" and root.parent.name.startswith("rtcagent-test-var-"):
        shutil.rmtree(root / "keys", ignore_errors=True)
    return get_store()


@pytest.fixture
def upload(store: Any) -> Callable[..., dict[str, Any]]:
    """Put ``data`` under the user's prefix; returns the ``files`` entry a client would send."""

    def put(user: Any, name: str, data: bytes, mimetype: str = "application/octet-stream",
            *, key: str | None = None) -> dict[str, Any]:
        key = key or f"user-{user.id}/{name}"
        if data is not None:
            store.put(key, data, content_type=mimetype)
        return {"fileid": key, "mimetype": mimetype, "extra": {"name": name, "size": len(data)}}

    return put
