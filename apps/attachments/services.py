"""Processing a conversation's attachments, once, before the model sees them.

``attachments_for_conversation`` is called by the worker whenever it builds what the model sees
(``apps.turns.runner.conversation_for``): files of the user messages that have no row yet are
processed now (so before the first LLM call of the turn that introduces them), every later call
reuses the rows.

For a batch of files:

1. Each object is read from the store in its own thread (``head``, then the first
   ``ATTACH_TEXT_MAX_BYTES`` (a range read), then the rest only for images).
2. Its magic bytes decide what it is (``sniff.py``). Text is checked and cut right there;
   images and SVG go to the process pool (``pool.py``, ``imaging.py``) all at once.
3. Derived objects (the model's JPEG and the thumbnail) are written under
   ``_derived/<user uuid>/``, never under the user's prefix; a skipped file writes nothing.
4. One transaction creates the rows and publishes one Update with a ``file`` created item per
   file; a row that exists already (another run got there first) is kept as it was.

Nothing here fails the turn: a missing object, an unsupported type, a refused or broken image,
a job that timed out or killed its process are all rows with status ``skipped`` and a warning the
user sees (``file`` entity) and the model reads (a one-line note).
"""

from __future__ import annotations

import base64
import logging
import posixpath
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from apps.gateway.events import item, publish_update
from apps.sessions.models import ContentType, Message, MessageRole
from apps.storage.base import NoSuchKey, ObjectStore, StoreError
from apps.storage.store import get_store
from rtcagent.conf import rtc_setting

from . import pool as pool_module
from .cache import data_urls
from .imaging import ImageRefused, ImageResult, Limits, process_image, process_svg
from .models import Attachment, AttachmentKind, AttachmentStatus, attachment_id
from .serializers import file_to_dict
from .sniff import IMAGE, SNIFF_BYTES, SVG, TEXT, Sniffed, sniff
from .text import NotUtf8, decode_cut

log = logging.getLogger(__name__)

DERIVED_PREFIX = "_derived/"
THUMB_SIDE = 256
MAX_SVG_BYTES = 10 * 1024 * 1024  # markup beyond this is not worth rasterising
LOADERS = 8  # threads reading objects at once
SUPPORTED = "images (JPEG, PNG, GIF, WebP, BMP, TIFF, SVG) and UTF-8 text"


def image_pool() -> pool_module.ImagePool:
    return pool_module.get_pool(
        workers=int(rtc_setting("ATTACH_POOL_WORKERS")),
        timeout=float(rtc_setting("ATTACH_JOB_TIMEOUT")),
        memory_bytes=int(rtc_setting("ATTACH_JOB_MEMORY_BYTES")),
    )


def limits() -> Limits:
    return Limits(
        max_side=int(rtc_setting("ATTACH_IMAGE_MAX_SIDE")),
        max_base64=int(rtc_setting("ATTACH_IMAGE_MAX_BASE64")),
        max_pixels=int(rtc_setting("ATTACH_IMAGE_MAX_PIXELS")),
        thumb_side=THUMB_SIDE,
    )


def files_of(message: Message) -> list[dict[str, Any]]:
    """The ``files`` of a user message (entries as validated at send)."""
    content = message.content or {}
    if message.role != MessageRole.USER or content.get("type") != ContentType.USER_MESSAGE:
        return []
    data = content.get("data")
    files = data.get("files") if isinstance(data, dict) else None
    return [f for f in files if isinstance(f, dict)] if isinstance(files, list) else []


def display_name(entry: dict[str, Any]) -> str:
    extra = entry.get("extra") if isinstance(entry.get("extra"), dict) else {}
    name = extra.get("name") if isinstance(extra.get("name"), str) else ""
    return name or posixpath.basename(str(entry.get("fileid", ""))) or "file"


@dataclass
class _Work:
    """One file on its way through the pipeline."""

    message: Message
    index: int
    entry: dict[str, Any]
    row: Attachment = field(init=False)
    data: bytes = b""
    sniffed: Sniffed | None = None
    image: ImageResult | None = None

    def __post_init__(self) -> None:
        claimed = self.entry.get("mimetype") if isinstance(self.entry.get("mimetype"), str) else ""
        self.row = Attachment(
            id=attachment_id(self.message.id, self.index),
            user_id=self.message.user_id,
            session_id=self.message.session_id,
            message_id=self.message.id,
            index=self.index,
            fileid=str(self.entry.get("fileid", ""))[:1024],
            name=display_name(self.entry)[:1024],
            claimed_mimetype=claimed[:255],
            mimetype=claimed[:255],
            kind=AttachmentKind.OTHER,
            status=AttachmentStatus.SKIPPED,
        )

    def skip(self, warning: str) -> None:
        self.row.status = AttachmentStatus.SKIPPED
        self.row.warning = warning
        self.data = b""


def _load(store: ObjectStore, work: _Work, text_max: int) -> None:
    """Read the object and decide what it is; text is finished here, images wait for the pool."""
    row = work.row
    try:
        info = store.head(row.fileid)
        row.size = info.size
        if info.size == 0:
            return work.skip("the file is empty")
        head = store.get(row.fileid, start=0, end=min(info.size, text_max + 4) - 1).read()
        found = work.sniffed = sniff(head[: max(SNIFF_BYTES, 64 * 1024)])
        row.mimetype = found.mimetype
        if found.kind == TEXT:
            row.kind = AttachmentKind.TEXT
            return _finish_text(work, head, text_max)
        if found.kind == SVG:
            row.kind = AttachmentKind.IMAGE
            if info.size > MAX_SVG_BYTES:
                return work.skip(f"the SVG is larger than {MAX_SVG_BYTES // (1024 * 1024)} MB")
        elif found.kind == IMAGE:
            row.kind = AttachmentKind.IMAGE
        else:
            return work.skip(f"unsupported file type: {found.label}; only {SUPPORTED} are read")
        work.data = head if len(head) == info.size else store.get(row.fileid).read()
    except NoSuchKey:
        work.skip("the file was not found in storage (was the upload finished?)")
    except StoreError as exc:
        log.warning("attachment %s: the store failed: %s", row.fileid, exc)
        work.skip("the file could not be read from storage")


def _finish_text(work: _Work, head: bytes, text_max: int) -> None:
    row = work.row
    try:
        cut = decode_cut(head, total_size=row.size, max_bytes=text_max)
    except NotUtf8 as exc:
        return work.skip(f"not UTF-8 text ({exc}); save it as UTF-8 to attach it")
    row.status = AttachmentStatus.READY
    row.text = cut.text
    row.truncated = cut.truncated
    if row.claimed_mimetype.startswith("text/") or row.claimed_mimetype in (
        "application/json", "application/xml", "application/javascript", "application/x-yaml",
    ):
        row.mimetype = row.claimed_mimetype  # more precise than "text/plain"; still escaped
    if cut.truncated:
        row.warning = f"only the first {cut.shown_bytes} of {row.size} bytes were read"
    return None


def _run_images(works: list[_Work], lim: Limits) -> None:
    jobs = [w for w in works if w.data and w.sniffed is not None]
    if not jobs:
        return
    calls = [
        (process_svg, (w.data, lim)) if w.sniffed.kind == SVG  # type: ignore[union-attr]
        else (process_image, (w.data, w.sniffed.pil_format, lim))  # type: ignore[union-attr]
        for w in jobs
    ]
    for work, outcome in zip(jobs, image_pool().map(calls), strict=True):
        work.data = b""
        if isinstance(outcome, ImageResult):
            work.image = outcome
        elif isinstance(outcome, ImageRefused):
            work.skip(str(outcome))
        elif isinstance(outcome, pool_module.JobTimedOut):
            work.skip(f"processing the image {outcome}")
        elif isinstance(outcome, pool_module.JobDied):
            work.skip("processing the image failed (it needed too much memory or crashed)")
        else:
            log.error("attachment %s: unexpected failure", work.row.fileid, exc_info=outcome)
            work.skip("processing the image failed")


def derived_keys(row: Attachment) -> tuple[str, str]:
    base = f"{DERIVED_PREFIX}{row.user_id}/{row.id}"
    return f"{base}.jpg", f"{base}.thumb.jpg"


def _store_image(store: ObjectStore, work: _Work) -> None:
    image, row = work.image, work.row
    if image is None:
        return
    main_key, thumb_key = derived_keys(row)
    try:
        store.put(main_key, image.jpeg, content_type="image/jpeg")
        store.put(thumb_key, image.thumbnail, content_type="image/jpeg")
    except StoreError as exc:
        log.warning("attachment %s: storing the derived image failed: %s", row.fileid, exc)
        return work.skip("the processed image could not be stored")
    row.status = AttachmentStatus.READY
    row.width, row.height, row.quality = image.width, image.height, image.quality
    row.derived_key, row.thumbnail_key = main_key, thumb_key
    data_urls.put(str(row.id), data_url(image.jpeg))
    return None


def data_url(jpeg: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")


def attachments_process(items: Sequence[tuple[Message, int, dict[str, Any]]]) -> list[Attachment]:
    """Process these files (message, position, entry) and record them; returns their rows."""
    if not items:
        return []
    store = get_store()
    lim = limits()
    text_max = int(rtc_setting("ATTACH_TEXT_MAX_BYTES"))
    works = [_Work(m, i, entry) for m, i, entry in items]
    with ThreadPoolExecutor(max_workers=min(LOADERS, len(works)),
                            thread_name_prefix="attach-load") as loaders:
        list(loaders.map(lambda w: _load(store, w, text_max), works))
        _run_images(works, lim)
        list(loaders.map(lambda w: _store_image(store, w), works))
    return _record(works)


def _record(works: list[_Work]) -> list[Attachment]:
    """Create the rows and publish them (``file`` created), each user's in one Update."""
    rows: list[Attachment] = []
    for user_id in dict.fromkeys(w.row.user_id for w in works):
        mine = [w.row for w in works if w.row.user_id == user_id]
        try:
            with transaction.atomic():
                existing = set(
                    Attachment.objects.filter(id__in=[r.id for r in mine])
                    .values_list("id", flat=True)
                )
                fresh = [r for r in mine if r.id not in existing]
                Attachment.objects.bulk_create(fresh)
                if fresh:
                    publish_update(
                        user_id=user_id,
                        items=[item("file", "created", r.id) for r in fresh],
                        data_list=[file_to_dict(r) for r in fresh],
                    )
        except IntegrityError:  # another run recorded them meanwhile: theirs stand
            log.info("attachments of user %s were recorded concurrently", user_id)
        rows += Attachment.objects.filter(id__in=[r.id for r in mine])
    return rows


def attachments_for_conversation(messages: Iterable[Message]) -> dict[Any, list[Attachment]]:
    """The attachments of these messages by message id (in ``files`` order), processing first
    the files that have none yet."""
    with_files = {m.id: m for m in messages if files_of(m)}
    if not with_files:
        return {}
    rows = list(Attachment.objects.filter(message_id__in=list(with_files)))
    have = {(r.message_id, r.index) for r in rows}
    missing = [
        (m, i, entry)
        for m in with_files.values()
        for i, entry in enumerate(files_of(m))
        if (m.id, i) not in have
    ]
    if missing:
        rows += attachments_process(missing)
    by_message: dict[Any, list[Attachment]] = {}
    for row in sorted({r.id: r for r in rows}.values(), key=lambda r: r.index):
        by_message.setdefault(row.message_id, []).append(row)
    return by_message


def image_data_url(row: Attachment) -> str | None:
    """The ``data:`` URL of a ready image (from the cache, else from the store); None when its
    derived object is gone."""
    cached = data_urls.get(str(row.id))
    if cached is not None:
        return cached
    try:
        body = get_store().get(row.derived_key)
        jpeg = body.read()
    except StoreError as exc:
        log.warning("attachment %s: derived image unavailable: %s", row.id, exc)
        return None
    url = data_url(jpeg)
    data_urls.put(str(row.id), url)
    return url


def attachments_purge_deleted(*, batch: int = 500) -> int:
    """Forget the attachments of deleted messages and sessions: their derived objects (the
    processed image and its thumbnail) are deleted from the store, then their rows. The
    user's own uploads stay (they are the user's files, under the user's prefix). Returns how
    many attachments were purged; meant for the worker's periodic sweep."""
    rows = list(
        Attachment.objects.filter(
            Q(message__deleted_at__isnull=False) | Q(session__deleted_at__isnull=False)
        ).values_list("pk", "derived_key", "thumbnail_key")[:batch]
    )
    if not rows:
        return 0
    keys = [key for _, *pair in rows for key in pair if key]
    if keys:
        failed = {f.key for f in get_store().delete_many(keys)}
        if failed:  # keep the rows whose objects are still there: tried again next sweep
            log.warning("attachments purge: %d derived objects not deleted", len(failed))
            rows = [r for r in rows if not failed & {r[1], r[2]}]
    for pk, *_ in rows:
        data_urls.drop(str(pk))
    Attachment.objects.filter(pk__in=[r[0] for r in rows]).delete()
    return len(rows)
