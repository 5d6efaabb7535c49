"""Attachments end to end: Daphne, worker processes (with their own image pools), the scripted
model and the official client. What the model receives, the ``file`` Updates, the thumbnail
over HTTP, and reuse by a later turn."""

from __future__ import annotations

import asyncio
import base64
import io
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from PIL import Image

from apps.accounts.tokens import issue_access_token
from apps.attachments.models import Attachment
from tests.attachments import samples
from tests.gateway.conftest import gateway  # noqa: F401 - fixture
from tests.turns.conftest import pool  # noqa: F401 - fixture
from tests.turns.stack import Browser

pytestmark = [pytest.mark.django_db(transaction=True)]


def _get(url: str, user: Any) -> tuple[int, str, bytes]:
    request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1
        url, headers={"Authorization": f"Bearer {issue_access_token(user)}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def _image(part: dict[str, Any]) -> Image.Image:
    head, _, payload = part["image_url"]["url"].partition(",")
    assert head == "data:image/jpeg;base64"
    return Image.open(io.BytesIO(base64.b64decode(payload)))


async def test_the_model_sees_what_was_attached(gateway, pool, model, make_user, upload,  # noqa: F811
                                                store) -> None:
    model.add_rule({"last_user_contains": "describe"}, {"content": "A red and blue photo."})
    model.add_rule({"last_user_contains": "and the colours"}, {"content": "Red over blue."})
    user, stranger = await sync_to_async(make_user)(), await sync_to_async(make_user)()
    files = [
        upload(user, "photo.jpg", samples.jpeg_with_orientation(6), "image/jpeg"),
        upload(user, "notes.txt", "café: 3 €\n".encode(), "text/plain"),
        upload(user, "report.png", samples.PDF, "image/png"),  # a PDF, whatever it claims
        {"fileid": f"user-{user.id}/gone.png", "mimetype": "image/png",
         "extra": {"name": "gone.png"}},
    ]
    async with Browser(gateway, user) as tab:
        sent = await tab.rpc("v1.message.send", {
            "content_data": {"type": "user_message",
                             "data": {"text": "describe these", "files": files}},
            "client_id": str(uuid.uuid4()),
        })
        sid = sent["result"]["session_id"]
        await tab.turn_status(sid, "completed")
        entities = await tab.until(lambda: len(tab.all("file")) == 4 and tab.all("file"))
        by_name = {e["name"]: e for e in entities}
        assert {n: (e["kind"], e["status"], e["mimetype"]) for n, e in by_name.items()} == {
            "photo.jpg": ("image", "ready", "image/jpeg"),
            "notes.txt": ("text", "ready", "text/plain"),
            "report.png": ("other", "skipped", "application/pdf"),
            "gone.png": ("other", "skipped", "image/png"),
        }
        photo = by_name["photo.jpg"]
        assert (photo["width"], photo["height"]) == (200, 400)
        assert photo["message_id"] == sent["result"]["message_id"] and photo["session_id"] == sid
        assert "not found in storage" in by_name["gone.png"]["warning"]
        # the files were processed (and published) before the model was called
        first_answer = min(u["offset"] for u in tab.updates for d in u["data_list"]
                           if d.get("role") == "assistant")
        assert max(u["offset"] for u in tab.updates
                   if u["items"][0]["entity"] == "file") < first_answer

        (request,) = model.requests
        prompt = request.body["messages"][-1]
        text, image = prompt["content"]
        assert text["text"] == (
            "describe these\n\n"
            '<file_content name="notes.txt" type="text/plain">\ncafé: 3 €\n\n</file_content>\n\n'
            '[Attachment skipped: "report.png" (application/pdf): unsupported file type: a PDF '
            "document; only images (JPEG, PNG, GIF, WebP, BMP, TIFF, SVG) and UTF-8 text are "
            'read]\n\n[Attachment skipped: "gone.png" (image/png): the file was not found in '
            "storage (was the upload finished?)]")
        picture = _image(image).convert("RGB")
        assert picture.size == (200, 400)
        assert picture.getpixel((100, 50))[0] > 200 and picture.getpixel((100, 350))[2] > 200

        status, kind, body = await asyncio.to_thread(
            _get, gateway.http_url + photo["thumbnail_url"], user)
        assert (status, kind) == (200, "image/jpeg")
        assert Image.open(io.BytesIO(body)).size == (128, 256)
        status, _, body = await asyncio.to_thread(
            _get, gateway.http_url + photo["thumbnail_url"], stranger)
        assert status == 404 and b"file.not_found" in body

        # A later turn: the same rows, no new file Update, the image sent again.
        await tab.send("and the colours?", sid)
        await tab.until(lambda: len([t for t in tab.turns(sid) if t["status"] == "completed"]) == 2)
        assert len(tab.all("file")) == 4
        assert sum(it["entity"] == "file" for u in tab.updates for it in u["items"]) == 4
    assert await sync_to_async(Attachment.objects.filter(user=user).count)() == 4
    second = model.requests[1].body["messages"]
    users = [m for m in second if m["role"] == "user"]
    assert users[0]["content"] == prompt["content"]
    assert users[1]["content"] == "and the colours?"
