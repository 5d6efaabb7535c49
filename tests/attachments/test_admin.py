"""The attachments page of the operator console: listed, searchable, read-only."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

from apps.attachments.models import Attachment
from apps.attachments.services import attachments_for_conversation
from apps.sessions.services import message_send

pytestmark = pytest.mark.django_db


def test_attachments_are_listed_and_read_only(make_user, upload) -> None:
    user = make_user()
    files = [upload(user, "quarterly.txt", b"numbers", "text/plain")]
    sent = message_send(user_id=user.id, device_id="", client_id=str(uuid.uuid4()),
                        content={"type": "user_message", "data": {"text": "x", "files": files}})
    attachments_for_conversation([sent.message])
    (row,) = Attachment.objects.filter(message=sent.message)
    staff = Client()
    staff.force_login(make_user(is_staff=True, is_superuser=True))
    page = staff.get("/admin/attachments/attachment/?q=quarterly&kind__exact=text")
    assert page.status_code == 200 and f"/{row.pk}/change/" in page.content.decode()
    assert f"/{row.pk}/change/" not in staff.get(
        "/admin/attachments/attachment/?status__exact=skipped").content.decode()
    view = staff.get(f"/admin/attachments/attachment/{row.pk}/change/")
    assert view.status_code == 200 and b'name="_save"' not in view.content
    assert staff.get("/admin/attachments/attachment/add/").status_code == 403
