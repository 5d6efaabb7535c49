"""``v1.file.list``: a session's processed attachments, to the session's owner only."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from apps.attachments.services import attachments_for_conversation
from apps.sessions.models import Message
from apps.sessions.services import message_send
from rtcagent.errors import NotFound
from tests.attachments import samples
from tests.sessions.factories import call

pytestmark = pytest.mark.django_db


def _sent(user: Any, upload: Any) -> Any:
    files = [upload(user, "a.png", samples.encode(samples.halves((40, 20)), "PNG"), "image/png"),
             upload(user, "b.txt", b"notes", "text/plain")]
    sent = message_send(user_id=user.id, device_id="", client_id=str(uuid.uuid4()),
                        content={"type": "user_message", "data": {"text": "x", "files": files}})
    attachments_for_conversation([sent.message])
    return sent


def test_the_owner_reads_the_file_entities_in_order(make_user, upload) -> None:
    user = make_user()
    sent = _sent(user, upload)
    reply = call("v1.file.list", user, {"session_id": str(sent.session.id), "limit": 1})
    (first,) = reply["items"]
    assert (first["name"], first["kind"], first["status"]) == ("a.png", "image", "ready")
    assert first["message_id"] == str(sent.message.id)
    rest = call("v1.file.list", user, {"session_id": str(sent.session.id),
                                       "cursor": reply["next_cursor"]})
    assert [f["name"] for f in rest["items"]] == ["b.txt"] and rest["next_cursor"] == ""


def test_another_user_and_deleted_messages_see_nothing(make_user, upload) -> None:
    user, other = make_user(), make_user()
    sent = _sent(user, upload)
    with pytest.raises(NotFound):
        call("v1.file.list", other, {"session_id": str(sent.session.id)})
    Message.objects.filter(pk=sent.message.pk).update(deleted_at="2030-01-01T00:00:00Z")
    assert call("v1.file.list", user, {"session_id": str(sent.session.id)})["items"] == []
