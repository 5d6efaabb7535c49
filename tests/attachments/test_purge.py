"""Attachments of deleted messages and sessions: derived objects and rows go, uploads stay."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from apps.attachments.models import Attachment
from apps.attachments.services import attachments_for_conversation, attachments_purge_deleted
from apps.sessions.models import Message, Session
from apps.sessions.services import message_send
from tests.attachments import samples

pytestmark = pytest.mark.django_db


def _sent(user: Any, upload: Any, name: str) -> Any:
    files = [upload(user, name, samples.encode(samples.halves((64, 32)), "PNG"), "image/png")]
    sent = message_send(user_id=user.id, device_id="", client_id=str(uuid.uuid4()),
                        content={"type": "user_message", "data": {"text": "x", "files": files}})
    attachments_for_conversation([sent.message])
    return sent


def test_deleted_messages_and_sessions_lose_their_derived_objects(make_user, upload, store) -> None:
    user = make_user()
    by_message, by_session, alive = (_sent(user, upload, n) for n in ("a.png", "b.png", "c.png"))
    rows = {s.message.id: Attachment.objects.get(message=s.message)
            for s in (by_message, by_session, alive)}
    assert all(r.derived_key and r.thumbnail_key for r in rows.values())
    Message.objects.filter(pk=by_message.message.pk).update(deleted_at="2030-01-01T00:00:00Z")
    Session.objects.filter(pk=by_session.session.pk).update(deleted_at="2030-01-01T00:00:00Z")

    assert attachments_purge_deleted() == 2
    remaining = list(Attachment.objects.filter(user=user))
    assert [r.message_id for r in remaining] == [alive.message.id]
    derived = {o.key for o in store.list(f"_derived/{user.id}/").objects}
    kept = rows[alive.message.id]
    assert derived == {kept.derived_key, kept.thumbnail_key}
    uploads = {o.key for o in store.list(f"user-{user.id}/").objects}
    assert uploads == {f"user-{user.id}/{n}" for n in ("a.png", "b.png", "c.png")}
    assert attachments_purge_deleted() == 0
