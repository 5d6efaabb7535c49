"""Objects nobody can reach any more: removed by the worker's periodic sweep.

A deleted user's rows go with the user (foreign keys cascade), but their objects do not: the
uploads under ``user-<id>/`` and what the attachment pipeline derived under ``_derived/<id>/``.
The sweep walks the store's top-level prefixes (a delimiter listing, so it reads one entry per
user, not every object) and deletes everything under the prefixes of users that no longer exist.
Prefixes that do not name a user id are left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.contrib.auth import get_user_model

from .base import ObjectStore
from .store import get_store

log = logging.getLogger(__name__)

USER_PREFIX = "user-"
DERIVED_PREFIX = "_derived/"


def _prefixes(store: ObjectStore, prefix: str) -> Iterator[str]:
    token: str | None = None
    while True:
        page = store.list(prefix, delimiter="/", continuation_token=token)
        yield from page.common_prefixes
        if not page.is_truncated or not page.next_token:
            return
        token = page.next_token


def _user_id(prefix: str, head: str) -> int | None:
    value = prefix[len(head):].rstrip("/")
    return int(value) if value.isdigit() else None


def _delete_under(store: ObjectStore, prefix: str) -> int:
    removed = 0
    while True:  # each page is listed after the previous one was deleted: no token needed
        page = store.list(prefix, max_keys=1000)
        keys = [o.key for o in page.objects]
        if not keys:
            return removed
        failed = store.delete_many(keys)
        removed += len(keys) - len(failed)
        if failed:
            log.warning("cleanup: %d objects under %s could not be deleted", len(failed), prefix)
            return removed


def orphans_purge(store: ObjectStore | None = None) -> int:
    """Delete the objects of users that no longer exist; returns how many were deleted."""
    store = store or get_store()
    candidates: dict[str, int] = {}
    for prefix in _prefixes(store, ""):
        if prefix.startswith(USER_PREFIX) and (uid := _user_id(prefix, USER_PREFIX)) is not None:
            candidates[prefix] = uid
    for prefix in _prefixes(store, DERIVED_PREFIX):
        if (uid := _user_id(prefix, DERIVED_PREFIX)) is not None:
            candidates[prefix] = uid
    if not candidates:
        return 0
    users = get_user_model().objects.filter(pk__in=set(candidates.values()))
    alive = set(users.values_list("pk", flat=True))
    removed = 0
    for prefix, uid in candidates.items():
        if uid not in alive:
            removed += _delete_under(store, prefix)
    if removed:
        log.info("cleanup: deleted %d objects of deleted users", removed)
    return removed
