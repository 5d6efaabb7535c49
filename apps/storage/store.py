"""The configured object store: one instance per process, chosen by ``RTC_OBJECT_STORE``."""

from __future__ import annotations

import threading

from django.conf import settings

from .base import ObjectStore

_lock = threading.Lock()
_store: ObjectStore | None = None


def build_store(config: dict) -> ObjectStore:
    """A new store for ``config`` (the shape of ``settings.RTC_OBJECT_STORE``)."""
    if config["BACKEND"] == "s3":
        from .backends.s3 import S3Store

        return S3Store.from_config(config)
    if config["BACKEND"] == "local":
        from .backends.local import LocalStore

        return LocalStore.from_config(config)
    raise ValueError(f"RTC_OBJECT_STORE: unknown backend {config['BACKEND']!r}")


def get_store() -> ObjectStore:
    """The process's store, built on first use."""
    global _store
    if _store is None:
        with _lock:
            if _store is None:
                _store = build_store(settings.RTC_OBJECT_STORE)
    return _store


def reset_store() -> None:
    """Close and forget the process's store (tests that switch backends)."""
    global _store
    with _lock:
        if _store is not None:
            _store.close()
        _store = None
