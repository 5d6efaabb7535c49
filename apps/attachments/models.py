"""Attachments: one row per file of a user message, written once the worker has processed it.

Invariants:

* The id is derived from (message, position in ``files``) (``attachment_id``), so processing
  the same file twice (a crash, a redelivered turn) finds the row or overwrites the same
  derived objects; it never makes a second one.
* Derived objects (the JPEG the model sees, the thumbnail) live under ``_derived/<user uuid>/``,
  outside every user prefix, so no user credential can overwrite what the server made.
* A row never changes after it is created: the ``file`` Update is published once (created).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

_NAMESPACE = uuid.UUID("6b1c2a4e-3f0d-5c8a-9e7b-2d4f6a8c0e1b")


def attachment_id(message_id: object, index: int) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"{message_id}:{index}")


class AttachmentKind(models.TextChoices):
    IMAGE = "image"
    TEXT = "text"
    OTHER = "other"


class AttachmentStatus(models.TextChoices):
    READY = "ready"
    SKIPPED = "skipped"


class Attachment(models.Model):
    id = models.UUIDField(primary_key=True, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="attachments"
    )
    session = models.ForeignKey(
        "agent_sessions.Session", on_delete=models.CASCADE, related_name="attachments"
    )
    message = models.ForeignKey(
        "agent_sessions.Message", on_delete=models.CASCADE, related_name="attachments"
    )
    index = models.PositiveSmallIntegerField()  # position in the message's ``files``
    fileid = models.CharField(max_length=1024)  # the object key the client sent
    name = models.CharField(max_length=1024, blank=True, default="")
    claimed_mimetype = models.CharField(max_length=255, blank=True, default="")
    mimetype = models.CharField(max_length=255, blank=True, default="")  # as detected
    size = models.BigIntegerField(default=0)  # of the stored object
    kind = models.CharField(max_length=8, choices=AttachmentKind.choices)
    status = models.CharField(max_length=8, choices=AttachmentStatus.choices)
    warning = models.TextField(blank=True, default="")
    # Images: the JPEG sent to the model and its thumbnail (derived keys), their size and the
    # quality the ladder settled on.
    width = models.PositiveIntegerField(default=0)
    height = models.PositiveIntegerField(default=0)
    quality = models.PositiveSmallIntegerField(default=0)
    derived_key = models.CharField(max_length=1024, blank=True, default="")
    thumbnail_key = models.CharField(max_length=1024, blank=True, default="")
    # Text: the part the model reads (cut at ATTACH_TEXT_MAX_BYTES on a character boundary).
    text = models.TextField(blank=True, default="")
    truncated = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["message", "index"], name="attachment_message_index"),
        ]

    def __str__(self) -> str:
        return f"{self.name or self.fileid} ({self.status})"
