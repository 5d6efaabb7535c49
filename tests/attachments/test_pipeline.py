"""The pipeline in-process: the real local store, the real image pool, the database. What a
turn's prompt is built from (``attachments_for_conversation``, ``conversation_for``), each bad
input, the ``file`` Updates, processing once, loading in parallel."""

from __future__ import annotations

import base64
import http.server
import io
import threading
from typing import Any

import pytest
from PIL import Image

from apps.attachments.models import Attachment
from apps.attachments.services import attachments_for_conversation
from apps.gateway import wire
from apps.gateway.models import TopicEvent
from apps.sessions.models import Message
from apps.sessions.services import message_send
from apps.turns.runner import conversation_for
from tests.attachments import samples
from tests.attachments.samples import RED

pytestmark = pytest.mark.django_db


def _send(user: Any, text: str, files: list[dict[str, Any]]) -> Message:
    sent = message_send(user_id=user.id, device_id="", client_id=f"c-{id(files)}-{text[:8]}",
                        content={"type": "user_message", "data": {"text": text, "files": files}})
    return sent.message


def _file_updates(user: Any) -> list[dict[str, Any]]:
    events = TopicEvent.objects.filter(user=user).order_by("offset")
    return [e.data for e in events if any(i["entity"] == "file" for i in e.data["items"])]


def _keys(store: Any, prefix: str) -> set[str]:
    return {o.key for o in store.list(prefix).objects}


def test_images_and_text_reach_the_prompt(make_user, upload, store) -> None:
    user = make_user()
    files = [
        upload(user, "photo.jpg", samples.jpeg_with_orientation(6), "image/jpeg"),
        upload(user, "notes.md", b"# Notes\nline 2\n", "text/markdown"),
        upload(user, "drawing.svg", samples.SVG_OK, "image/svg+xml"),
    ]
    message = _send(user, "what is in these?", files)
    session = message.session
    (prompt,) = conversation_for(session)
    assert prompt["role"] == "user"
    text, photo, drawing = prompt["content"]
    assert text == {"type": "text", "text": (
        'what is in these?\n\n<file_content name="notes.md" type="text/markdown">\n'
        "# Notes\nline 2\n\n</file_content>")}
    for part, size in ((photo, (200, 400)), (drawing, (512, 256))):
        assert part["type"] == "image_url"
        head, _, payload = part["image_url"]["url"].partition(",")
        assert head == "data:image/jpeg;base64"
        img = Image.open(io.BytesIO(base64.b64decode(payload)))
        assert img.format == "JPEG" and img.size == size
    rows = Attachment.objects.filter(message=message).order_by("index")
    assert [(r.kind, r.status, r.mimetype, r.warning) for r in rows] == [
        ("image", "ready", "image/jpeg", ""),
        ("text", "ready", "text/markdown", ""),
        ("image", "ready", "image/svg+xml", ""),
    ]
    assert _keys(store, f"_derived/{user.id}/") == {
        f"_derived/{user.id}/{r.id}{suffix}" for r in rows if r.kind == "image"
        for suffix in (".jpg", ".thumb.jpg")
    }


def test_the_file_entities_are_published_once(make_user, upload) -> None:
    user = make_user()
    message = _send(user, "look", [
        upload(user, "a.png", samples.encode(samples.halves((64, 32)), "PNG"), "image/png"),
        upload(user, "report.pdf", samples.PDF, "application/pdf"),
    ])
    attachments_for_conversation([message])
    attachments_for_conversation([message])  # processed once: no second Update
    conversation_for(message.session)
    (update,) = _file_updates(user)
    wire.check_publication({**update, "offset": 1})
    image, pdf = update["data_list"]
    rows = {str(r.id): r for r in Attachment.objects.filter(message=message)}
    assert image == {
        "id": image["id"], "session_id": str(message.session_id),
        "message_id": str(message.id), "fileid": f"user-{user.id}/a.png", "name": "a.png",
        "mimetype": "image/png", "size": rows[image["id"]].size, "kind": "image",
        "status": "ready", "warning": "", "width": 64, "height": 32,
        "thumbnail_url": f"/api/files/{image['id']}/thumbnail",
        "created_at": image["created_at"],
    }
    assert (pdf["kind"], pdf["status"], pdf["mimetype"], pdf["thumbnail_url"]) == (
        "other", "skipped", "application/pdf", "")
    assert pdf["warning"] == ("unsupported file type: a PDF document; only images (JPEG, PNG, "
                              "GIF, WebP, BMP, TIFF, SVG) and UTF-8 text are read")


BAD = [
    ("bomb.png", samples.png_claiming(100_000, 100_000), "image/png",
     "image/png", "too many pixels (10,000,000,000)"),
    ("cut.jpg", samples.truncated_jpeg(), "image/jpeg", "image/jpeg", "truncated or corrupt"),
    ("figure.png", samples.EPS, "image/png", "application/postscript",
     "unsupported file type: an EPS/PostScript file"),
    ("layers.png", samples.PSD, "image/png", "image/vnd.adobe.photoshop",
     "unsupported file type: a Photoshop (PSD) file"),
    ("latin1.txt", "caf\xe9 cr\xe8me".encode("latin-1"), "text/plain", "text/plain",
     "not UTF-8 text (byte 3 is not UTF-8); save it as UTF-8"),
    ("empty.txt", b"", "text/plain", "text/plain", "the file is empty"),
    ("laughs.svg", samples.SVG_LAUGHS, "image/svg+xml", "image/svg+xml",
     "the SVG declares a DTD or entities"),
    ("use-bomb.svg", samples.svg_use_bomb(), "image/svg+xml", "image/svg+xml",
     "the SVG's references expand to more than"),
]


def test_each_bad_input_is_skipped_with_a_clear_warning(make_user, upload, store) -> None:
    user = make_user()
    files = [upload(user, name, data, claimed) for name, data, claimed, _, _ in BAD]
    files.append({"fileid": f"user-{user.id}/never-uploaded.png", "mimetype": "image/png",
                  "extra": {"name": "never-uploaded.png"}})
    before = _keys(store, f"user-{user.id}/")
    message = _send(user, "check these", files)
    (prompt,) = conversation_for(message.session)
    rows = list(Attachment.objects.filter(message=message).order_by("index"))
    expected = [(m, w) for _, _, _, m, w in BAD] + [
        ("image/png", "the file was not found in storage")]
    for row, (mimetype, warning) in zip(rows, expected, strict=True):
        assert (row.status, row.mimetype) == ("skipped", mimetype), row.name
        assert warning in row.warning, (row.name, row.warning)
        assert not row.derived_key and not row.thumbnail_key
    assert isinstance(prompt["content"], str)  # no image part at all
    lines = prompt["content"].split("\n\n")
    assert lines[0] == "check these"
    assert lines[1] == ('[Attachment skipped: "bomb.png" (image/png): the image has too many '
                        "pixels (10,000,000,000): at most 50,000,000 are accepted (refused as "
                        "a possible decompression bomb)]")
    assert [line.split('"')[1] for line in lines[1:]] == [r.name for r in rows]
    # nothing written: not in the user's prefix, not in the derived one
    assert _keys(store, f"user-{user.id}/") == before
    assert _keys(store, f"_derived/{user.id}/") == set()


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_an_svg_with_external_references_fetches_nothing(make_user, upload) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        user = make_user()
        message = _send(user, "draw", [
            upload(user, "ext.svg", samples.svg_with_external(base), "image/svg+xml"),
            upload(user, "file.svg", samples.svg_with_external("file:///etc"), "image/svg+xml"),
        ])
        (prompt,) = conversation_for(message.session)
    finally:
        server.shutdown()
        server.server_close()
    assert _Recorder.hits == []
    rows = Attachment.objects.filter(message=message)
    assert {(r.status, r.kind) for r in rows} == {("ready", "image")}
    assert [p["type"] for p in prompt["content"]] == ["text", "image_url", "image_url"]


def test_text_is_cut_on_a_character_boundary(make_user, upload, settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "ATTACH_TEXT_MAX_BYTES": 10}
    user = make_user()
    message = _send(user, "read", [upload(user, 'a"b</file_content>.txt',
                                          ("a" * 9 + "é" + "z" * 50).encode(), "text/plain")])
    (prompt,) = conversation_for(message.session)
    assert prompt["content"] == (
        'read\n\n<file_content name="a&quot;b&lt;/file_content&gt;.txt" type="text/plain" '
        'truncated="true">\naaaaaaaaa\n[truncated: the first 9 of 61 bytes are shown]\n'
        "</file_content>")
    (row,) = Attachment.objects.filter(message=message)
    assert (row.truncated, row.warning) == (True, "only the first 9 of 61 bytes were read")


def test_processed_files_are_reused_by_later_calls(make_user, upload, store) -> None:
    from apps.attachments.cache import data_urls

    user = make_user()
    message = _send(user, "one", [upload(user, "p.jpg", samples.jpeg_with_orientation(3),
                                         "image/jpeg")])
    first = conversation_for(message.session)
    (row,) = Attachment.objects.filter(message=message)
    stamp = store.head(row.derived_key).last_modified
    data_urls.clear()  # another worker process: read back from the store, not decoded again
    second = conversation_for(message.session)
    assert second == first
    assert Attachment.objects.filter(message=message).count() == 1
    assert store.head(row.derived_key).last_modified == stamp
    assert len(_file_updates(user)) == 1
    img = Image.open(io.BytesIO(base64.b64decode(
        second[0]["content"][1]["image_url"]["url"].split(",", 1)[1]))).convert("RGB")
    # orientation 3 is a half turn: the blue half is now on the left
    assert img.getpixel((50, 100))[2] > 200 and img.getpixel((350, 100))[0] > 200


def test_files_are_loaded_in_parallel(make_user, upload, settings) -> None:
    """A store whose reads wait until three of them are in flight at once: a loader reading one
    file after another would never get past the first."""
    from apps.storage import store as store_module
    from apps.storage.backends.local import LocalStore

    class GatedStore(LocalStore):
        barrier = threading.Barrier(3, timeout=20)

        def head(self, key: str) -> Any:
            if key.startswith("user-"):
                self.barrier.wait()
            return super().head(key)

    user = make_user()
    files = [upload(user, f"{n}.txt", f"file {n}".encode(), "text/plain") for n in range(3)]
    message = _send(user, "three", files)
    original = store_module._store
    store_module._store = GatedStore.from_config(settings.RTC_OBJECT_STORE)
    try:
        (prompt,) = conversation_for(message.session)
    finally:
        store_module._store = original
    assert not GatedStore.barrier.broken
    for n in range(3):
        assert f'<file_content name="{n}.txt" type="text/plain">\nfile {n}\n' in prompt["content"]


def test_colours_survive_the_pipeline(make_user, upload) -> None:
    user = make_user()
    message = _send(user, "gif", [upload(user, "anim.gif", samples.two_frame_gif(), "image/gif")])
    (prompt,) = conversation_for(message.session)
    img = Image.open(io.BytesIO(base64.b64decode(
        prompt["content"][1]["image_url"]["url"].split(",", 1)[1]))).convert("RGB")
    assert all(abs(a - b) < 40 for a, b in zip(img.getpixel((20, 15)), RED, strict=True))
