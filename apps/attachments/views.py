"""``GET /api/files/{id}/thumbnail``: the small JPEG the pipeline made of an image attachment.

JWT like every ``/api/`` view; only the owner gets it, anybody else a 404 (never a 403, which
would tell that the file exists). Streamed from the object store.
"""

from __future__ import annotations

import uuid

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from apps.storage.base import NoSuchKey
from apps.storage.store import get_store
from rtcagent.errors import NotFound

from .selectors import attachment_thumbnail_key


class FileThumbnailView(APIView):
    @extend_schema(
        responses={200: OpenApiResponse(OpenApiTypes.BINARY, description="image/jpeg"),
                   404: OpenApiResponse(description="no such file of yours")},
        tags=["files"],
    )
    def get(self, request: Request, file_id: uuid.UUID) -> StreamingHttpResponse:
        key = attachment_thumbnail_key(user_id=request.user.id, attachment_id=file_id)
        try:
            body = get_store().get(key)
        except NoSuchKey:
            raise NotFound("file", file_id) from None
        response = StreamingHttpResponse(body.chunks, content_type="image/jpeg")
        response["Content-Length"] = str(body.length)
        # Derived once and never changed: the browser may keep it, but only for this user.
        response["Cache-Control"] = "private, max-age=86400, immutable"
        return response


__all__ = ["FileThumbnailView"]
