"""``GET /api/files/{id}/thumbnail``: the owner gets the JPEG, everybody else a 404."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from django.test import Client
from PIL import Image

from apps.accounts.tokens import issue_access_token
from apps.attachments.models import Attachment
from apps.attachments.services import attachments_for_conversation
from apps.sessions.services import message_send
from tests.attachments import samples

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    return Client(headers={"Authorization": f"Bearer {issue_access_token(user)}"})


def _processed(user: Any, upload: Any) -> list[Attachment]:
    files = [upload(user, "wide.png", samples.encode(samples.halves((3000, 1000)), "PNG"),
                    "image/png"),
             upload(user, "notes.txt", b"plain text", "text/plain")]
    sent = message_send(user_id=user.id, device_id="", client_id=str(uuid.uuid4()),
                        content={"type": "user_message", "data": {"text": "x", "files": files}})
    attachments_for_conversation([sent.message])
    return list(Attachment.objects.filter(message=sent.message).order_by("index"))


def test_the_owner_gets_a_small_jpeg(make_user, upload) -> None:
    user = make_user()
    image, _ = _processed(user, upload)
    response = _client(user).get(f"/api/files/{image.id}/thumbnail")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/jpeg"
    assert "private" in response["Cache-Control"]
    body = b"".join(response.streaming_content)
    assert int(response["Content-Length"]) == len(body)
    thumb = Image.open(io.BytesIO(body))
    assert thumb.format == "JPEG" and thumb.size == (256, 85)


def test_anybody_else_gets_404(make_user, upload) -> None:
    user, other = make_user(), make_user()
    image, text = _processed(user, upload)
    for client, file_id in [(_client(other), image.id), (_client(user), text.id),
                            (_client(user), uuid.uuid4())]:
        response = client.get(f"/api/files/{file_id}/thumbnail")
        assert response.status_code == 404
        assert response.json()["code"] == "file.not_found"
    assert Client().get(f"/api/files/{image.id}/thumbnail").status_code == 401
