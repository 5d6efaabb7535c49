"""The ``file`` entity of the Updates (``docs/protocol.md``), as an ``apps.gateway.wire`` schema.

Published once, when the server has processed the file (``file`` / ``created``):
``{id, session_id, message_id, fileid, name, mimetype, size, kind, status, warning, width,
height, thumbnail_url, created_at}``. ``mimetype`` is the detected type (the claimed one when
the file was skipped before its type was known); ``thumbnail_url`` is
``/api/files/<id>/thumbnail`` for images and ``""`` otherwise.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway import wire
from apps.gateway.wire import Derived, Id, Timestamp, WireSerializer

from .models import Attachment, AttachmentKind, AttachmentStatus

__all__ = ["FileSerializer", "file_to_dict", "thumbnail_url"]


def thumbnail_url(attachment: Attachment) -> str:
    return f"/api/files/{attachment.id}/thumbnail" if attachment.thumbnail_key else ""


def _text(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(allow_blank=True, **kwargs)


@wire.entity("file")
class FileSerializer(WireSerializer):
    """A user message's attachment as the server processed it."""

    id = Id()
    session_id = Id()
    message_id = Id()
    fileid = _text()
    name = _text()
    mimetype = _text()
    size = serializers.IntegerField(min_value=0)
    kind = serializers.ChoiceField(choices=AttachmentKind.choices)
    status = serializers.ChoiceField(choices=AttachmentStatus.choices)
    warning = _text()
    width = serializers.IntegerField(min_value=0)
    height = serializers.IntegerField(min_value=0)
    thumbnail_url = Derived(thumbnail_url, like=_text())
    created_at = Timestamp()


def file_to_dict(attachment: Attachment) -> dict[str, Any]:
    return FileSerializer.render(attachment)
