"""Objects nobody can reach any more: removed by the worker's periodic sweep.

A deleted user's rows go with the user (foreign keys cascade), but their objects do not: the
uploads under ``user-<id>/`` and what the attachment pipeline derived under ``_derived/<id>/``.
The sweep walks the store's top-level prefixes (a delimiter listing, so it reads one entry per
user, not every object) and deletes everything under the prefixes of users that no longer exist.
Prefixes that do not name a user id are left alone.

Uploads nobody sent: each presigned PUT under ``user-<id>/uploads/`` leaves a ``PendingUpload``
row. Once it is older than ``UNSENT_UPLOAD_TTL_HOURS``, the object is deleted unless a message of
the user names it in its ``files`` (a cancelled upload whose bytes had already arrived, a file
attached and never sent); the row goes either way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from rtcagent.conf import rtc_setting

from .base import ObjectStore
from .models import PendingUpload
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


def _sent_keys(user_id: int) -> set[str]:
    """The object keys the user's messages name in their ``files`` (deleted messages too: the
    uploads of a deleted message stay the user's files)."""
    from apps.sessions.models import Message, MessageRole  # storage sits below sessions

    keys: set[str] = set()
    messages = Message.objects.filter(user_id=user_id, role=MessageRole.USER,
                                      content__data__has_key="files")
    for content in messages.values_list("content", flat=True).iterator():
        files = (content.get("data") or {}).get("files") if isinstance(content, dict) else None
        for entry in files if isinstance(files, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("fileid"), str):
                keys.add(entry["fileid"])
    return keys


def unsent_uploads_purge(store: ObjectStore | None = None, *, older_than: float | None = None,
                         batch: int = 500) -> int:
    """Delete the uploads presigned more than ``older_than`` seconds ago (default
    ``UNSENT_UPLOAD_TTL_HOURS``) that no message names; returns how many objects were deleted.
    A row whose object could not be deleted stays for the next sweep."""
    if older_than is None:
        older_than = float(rtc_setting("UNSENT_UPLOAD_TTL_HOURS")) * 3600
    cutoff = timezone.now() - timedelta(seconds=older_than)
    rows = list(PendingUpload.objects.filter(created_at__lte=cutoff)
                .order_by("user_id").values_list("pk", "user_id", "key")[:batch])
    if not rows:
        return 0
    sent: dict[int, set[str]] = {}
    doomed: dict[str, int] = {}
    for pk, user_id, key in rows:
        if user_id not in sent:
            sent[user_id] = _sent_keys(user_id)
        if key not in sent[user_id]:
            doomed[key] = pk
    store = store or get_store()
    failed = {f.key for f in store.delete_many(list(doomed))} if doomed else set()
    if failed:
        log.warning("cleanup: %d unsent uploads could not be deleted", len(failed))
    done = [pk for pk, _, key in rows if key not in failed]
    PendingUpload.objects.filter(pk__in=done).delete()
    removed = len(doomed) - len(failed)
    if removed:
        log.info("cleanup: deleted %d uploads no message names", removed)
    return removed
