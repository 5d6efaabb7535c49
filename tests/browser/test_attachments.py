"""The widget attaches files: drag-and-drop, paste, the paperclip and the VFS file panel; presigned
PUTs with progress, cancel and retry; the checks made before any upload; what reaches the store
and the model; thumbnails and the server's warnings in the conversation."""

from __future__ import annotations

import base64
import hashlib
import io
import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login, send
from tests.livesrv import LiveServer, start_daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MAX_BYTES = 2 * 1024 * 1024  # the server's object size limit in these tests


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The conftest's server with a small object size limit, which the connect reply tells."""
    server = start_daphne(tmp_path_factory.mktemp("web"), DJANGO_DEBUG="true",
                          RTC_MODEL="scripted-model", RTC_S3_MAX_OBJECT_BYTES=str(MAX_BYTES))
    yield server
    server.stop()


def png(color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (64, 48)) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


COMPOSER = "document.querySelector('rtc-agent').shadowRoot.querySelector('rtc-composer')"
EVENT = "{ bubbles: true, composed: true, cancelable: true }"


def drag_in(page: Any, files: list[dict[str, Any]]) -> None:
    """Drag files over the composer (dragenter, dragover), as a file manager would. Each file is
    ``{name, type, data: bytes}`` or ``{name, type, size}`` (zero bytes of that length)."""
    wire = [{"name": f["name"], "type": f["type"], "size": f.get("size", 0),
             "b64": base64.b64encode(f["data"]).decode() if "data" in f else None} for f in files]
    page.evaluate("""(files) => {
      const dt = new DataTransfer();
      for (const f of files) {
        const bytes = f.b64 ? Uint8Array.from(atob(f.b64), (c) => c.charCodeAt(0))
          : new Uint8Array(f.size);
        dt.items.add(new File([bytes], f.name, { type: f.type }));
      }
      window.__drag = dt;
      for (const type of ['dragenter', 'dragover']) {
        COMPOSER.dispatchEvent(new DragEvent(type, { dataTransfer: dt, ...EVENT }));
      }
    }""".replace("COMPOSER", COMPOSER).replace("EVENT", EVENT), wire)


def drop(page: Any) -> None:
    page.evaluate(f"() => {COMPOSER}.dispatchEvent(new DragEvent('drop', "
                  f"{{ dataTransfer: window.__drag, ...{EVENT} }}))")


def drop_files(page: Any, files: list[dict[str, Any]]) -> None:
    drag_in(page, files)
    drop(page)


def store_keys(prefix: str) -> list[str]:
    from apps.storage.store import get_store

    return [o.key for o in get_store().list(prefix=prefix).objects]


def upload_requests(page: Any) -> list[str]:
    """Every request the page makes towards the object store, as "METHOD path"."""
    seen: list[str] = []

    def on_request(req: Any) -> None:
        path = re.sub(r"^https?://[^/]+", "", req.url)
        if path.startswith(("/api/presigned-url", "/s3/")):
            seen.append(f"{req.method} {path.split('?')[0]}")

    page.on("request", on_request)
    return seen


def test_a_dropped_image_and_a_vfs_file_are_uploaded_sent_and_seen_by_the_model(
        page: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    from apps.sessions.models import Message
    from apps.storage.store import get_store

    model.add_rule({"last_user_contains": "what do you see"},
                   {"content": "A red rectangle, and a plan to ship the widget."})
    login(page, web_user)
    requests = upload_requests(page)
    note = "# Plan\n\nShip the widget.\n"
    page.evaluate("(text) => document.querySelector('rtc-agent').agent.vfs"
                  ".write('/notes/plan.md', text)", note)
    page.click("rtc-agent header [data-act=files]")
    page.click("rtc-file-panel li[data-path='/notes/plan.md']")
    page.click("rtc-file-panel [data-act=attach]")

    image = png()
    drag_in(page, [{"name": "red.png", "type": "image/png", "data": image}])
    expect(page.locator("rtc-composer .drop")).to_be_visible()  # the drop zone while dragging
    drop(page)
    expect(page.locator("rtc-composer .drop")).to_be_hidden()
    chips = page.locator("rtc-composer li.chip")
    expect(chips).to_have_count(2)
    expect(chips.nth(0)).to_contain_text("plan.md")
    expect(chips.nth(1)).to_contain_text("red.png")
    expect(chips.nth(1).locator("img.thumb")).to_have_attribute("src", re.compile(r"^blob:"))
    expect(page.locator("rtc-composer li.chip[data-status=done]")).to_have_count(2, timeout=15000)

    prefix = f"user-{web_user.id}/uploads/"
    image_key, note_key = f"{prefix}{sha(image)}.png", f"{prefix}{sha(note.encode())}.md"
    assert sorted(store_keys(prefix)) == sorted([image_key, note_key])
    assert get_store().get(image_key).read() == image
    assert get_store().get(note_key).read() == note.encode()
    assert sorted(requests) == sorted(["POST /api/presigned-url", "POST /api/presigned-url",
                                       f"PUT /s3/{_bucket()}/{image_key}",
                                       f"PUT /s3/{_bucket()}/{note_key}"])

    send(page, "what do you see?")
    answer = page.locator("rtc-message-list .md").last
    expect(answer).to_have_text("A red rectangle, and a plan to ship the widget.", timeout=20000)
    expect(page.locator("rtc-composer li.chip")).to_have_count(0)
    sent = Message.objects.get(user=web_user, role="user").content
    assert sent == {"type": "user_message", "data": {"text": "what do you see?", "files": [
        {"fileid": note_key, "mimetype": "text/markdown",
         "extra": {"name": "plan.md", "size": len(note)}},
        {"fileid": image_key, "mimetype": "image/png",
         "extra": {"name": "red.png", "size": len(image)}},
    ]}}

    # What the model received: the image as an image part, the note inlined as text.
    (user,) = [m for m in model.requests[-1].body["messages"] if m["role"] == "user"]
    assert isinstance(user["content"], list), user
    text = "".join(p.get("text", "") for p in user["content"] if p.get("type") == "text")
    images = [p for p in user["content"] if p.get("type") == "image_url"]
    assert "what do you see?" in text
    assert '<file_content name="plan.md"' in text and "Ship the widget." in text
    assert len(images) == 1 and images[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")

    # The server's `file` entities: the image shows its thumbnail (a blob: URL), both are ready.
    atts = page.locator("rtc-message-list li.att")
    expect(atts).to_have_count(2)
    ready = page.locator("rtc-message-list li.att[data-status=ready]")
    expect(ready).to_have_count(2, timeout=20000)
    expect(atts.nth(1).locator("img")).to_have_attribute("src", re.compile(r"^blob:"),
                                                         timeout=10000)
    assert page.locator("rtc-message-list .warn").count() == 0
    assert page.errors == []


def test_a_file_the_server_skips_shows_its_warning_under_the_message(
        page: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    model.add_rule({"last_user_contains": "read this"}, {"content": "I could not read it."})
    login(page, web_user)
    latin1 = "café\n".encode("latin-1")
    drop_files(page, [{"name": "latin1.txt", "type": "text/plain", "data": latin1}])
    expect(page.locator("rtc-composer li.chip[data-status=done]")).to_have_count(1, timeout=15000)
    send(page, "read this")
    expect(page.locator("rtc-message-list .md").last).to_have_text("I could not read it.",
                                                                   timeout=20000)
    att = page.locator("rtc-message-list li.att")
    expect(att).to_have_attribute("data-status", "skipped", timeout=20000)
    warning = page.locator("rtc-message-list .warn")
    expect(warning).to_contain_text("latin1.txt: not UTF-8 text")
    (user,) = [m for m in model.requests[-1].body["messages"] if m["role"] == "user"]
    assert "latin1.txt" in str(user["content"])  # the model is told the file was skipped
    # The file entities are kept across a reload (the topic replays only what came after).
    page.wait_for_timeout(600)
    page.reload()
    expect(page.locator("rtc-agent .conn")).to_have_text("connected", timeout=15000)
    expect(att).to_have_attribute("data-status", "skipped")
    expect(warning).to_contain_text("latin1.txt: not UTF-8 text")
    assert page.errors == []


def _bucket() -> str:
    from django.conf import settings

    return str(getattr(settings, "RTC_S3_BUCKET", "rtc-agent"))


def test_a_file_too_large_or_of_a_refused_type_is_refused_before_any_request(
        page: Any, web: Any, web_user: Any) -> None:
    login(page, web_user)
    requests = upload_requests(page)
    drop_files(page, [{"name": "big.png", "type": "image/png", "size": MAX_BYTES + 1024 * 1024},
                      {"name": "report.pdf", "type": "application/pdf", "data": b"%PDF-1.7\n"},
                      {"name": "bundle.zip", "type": "application/zip", "data": b"PK\x03\x04"},
                      {"name": "empty.txt", "type": "text/plain", "data": b""}])
    notice = page.locator("rtc-composer .notice")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("big.png is 3.0 MB: files may be at most 2.0 MB.")
    expect(notice).to_contain_text("report.pdf: PDF documents (application/pdf) cannot be attached")
    expect(notice).to_contain_text("bundle.zip: archives (application/zip) cannot be attached")
    expect(notice).to_contain_text("empty.txt is empty.")
    expect(notice).to_contain_text("images (JPEG, PNG, BMP, TIFF, SVG, WebP, GIF) and text files")
    assert page.locator("rtc-composer li.chip").count() == 0
    # The paperclip's picker goes through the same checks.
    page.set_input_files("rtc-composer input[type=file]", files=[
        {"name": "slides.pptx", "buffer": b"PK\x03\x04",
         "mimeType": "application/vnd.openxmlformats-officedocument.presentationml.presentation"}])
    expect(notice).to_contain_text("slides.pptx: office documents")
    page.wait_for_timeout(500)  # anything sent would have left by now
    assert requests == []
    assert page.locator("rtc-composer li.chip").count() == 0
    assert store_keys(f"user-{web_user.id}/") == []
    page.click("rtc-composer .notice [data-act=dismiss]")
    expect(notice).to_be_hidden()

    # More files than a message may carry: the first ten are attached, the rest named.
    drop_files(page, [{"name": f"n{i}.txt", "type": "text/plain", "data": f"note {i}".encode()}
                      for i in range(12)])
    expect(page.locator("rtc-composer li.chip")).to_have_count(10)
    expect(notice).to_contain_text("At most 10 files per message: n10.txt, n11.txt not attached.")
    assert page.errors == []


def test_cancel_during_an_upload_leaves_no_chip_and_no_object_after_the_sweep(
        page: Any, context: Any, web: Any, web_user: Any) -> None:
    login(page, web_user)
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    # 1.5 MB at 64 KB/s: the upload is still running when it is cancelled.
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": 0,
                                                  "downloadThroughput": -1,
                                                  "uploadThroughput": 64 * 1024})
    requests = upload_requests(page)
    drop_files(page, [{"name": "large.txt", "type": "text/plain", "data": b"x" * 1_500_000}])
    chip = page.locator("rtc-composer li.chip")
    expect(chip).to_have_attribute("data-status", "uploading")
    expect(chip.locator("progress")).to_be_visible()
    page.wait_for_function("""() => { const c = document.querySelector('rtc-agent').shadowRoot
        .querySelector('rtc-composer').shadowRoot.querySelector('li.chip progress');
        return c && c.value > 0; }""", timeout=15000)
    send_button = page.locator("rtc-composer [data-act=send]")
    expect(send_button).to_be_disabled()  # nothing is sent while an upload runs
    page.click("rtc-composer li.chip [data-act=remove]")
    expect(chip).to_have_count(0)
    expect(send_button).to_be_enabled()
    cdp.send("Network.emulateNetworkConditions", {"offline": False, "latency": 0,
                                                  "downloadThroughput": -1, "uploadThroughput": -1})
    page.wait_for_timeout(1500)  # an upload still going on would have finished by now
    assert len([r for r in requests if r.startswith("PUT ")]) == 1
    # Chromium may have handed the whole body to the socket before the abort (its upload
    # throttling is emulated): then the object arrived, no message names it, and the sweep
    # removes it once it is older than UNSENT_UPLOAD_TTL_HOURS (here: at once).
    from apps.storage.cleanup import unsent_uploads_purge
    from apps.storage.store import get_store

    unsent_uploads_purge(get_store(), older_than=0)
    assert store_keys(f"user-{web_user.id}/") == []
    assert page.errors == []


def test_a_failing_upload_is_retried_and_then_offers_retry(
        page: Any, web: Any, web_user: Any) -> None:
    login(page, web_user)
    slow_down = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>"
                 "<Message>Please reduce your request rate.</Message></Error>")
    answers = ["503", "503"]
    puts: list[str] = []

    def s3(route: Any) -> None:
        puts.append(route.request.method)
        if answers:
            answers.pop(0)
            route.fulfill(status=503, body=slow_down, content_type="application/xml")
        else:
            route.continue_()

    page.route("**/s3/**", s3)
    data = b"retry me\n"
    drop_files(page, [{"name": "retry.txt", "type": "text/plain", "data": data}])
    chip = page.locator("rtc-composer li.chip")
    expect(chip).to_have_attribute("data-status", "waiting")
    expect(chip).to_contain_text("the server is busy (SlowDown); retrying in")
    expect(chip).to_have_attribute("data-status", "done", timeout=15000)
    assert puts == ["PUT", "PUT", "PUT"]
    key = f"user-{web_user.id}/uploads/{sha(data)}.txt"
    assert store_keys(f"user-{web_user.id}/") == [key]
    chip.locator("[data-act=remove]").click()

    # Failing every time: three automatic retries, then Retry by hand.
    page.unroute("**/s3/**")
    answers[:] = ["503"] * 4
    puts.clear()
    page.route("**/s3/**", s3)
    page.evaluate("""() => {  // pasted this time, as a file copied in a file manager
      const dt = new DataTransfer();
      dt.items.add(new File(['again\\n'], 'again.txt', { type: 'text/plain' }));
      const input = COMPOSER.shadowRoot.querySelector('textarea');
      input.dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, ...EVENT }));
    }""".replace("COMPOSER", COMPOSER).replace("EVENT", EVENT))
    expect(chip).to_have_attribute("data-status", "failed", timeout=20000)
    assert puts == ["PUT"] * 4
    expect(page.locator("rtc-composer [data-act=send]")).to_be_disabled()
    retry = chip.locator("[data-act=retry]")
    expect(retry).to_have_attribute("aria-label", "Retry uploading again.txt")
    retry.focus()
    page.keyboard.press("Enter")  # keyboard reachable
    expect(chip).to_have_attribute("data-status", "done", timeout=15000)
    assert puts == ["PUT"] * 5
    expect(page.locator("rtc-composer [data-act=send]")).to_be_enabled()
    assert page.errors == []
