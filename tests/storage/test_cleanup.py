"""The sweep's clean-up: a deleted user's uploads and derived objects go; nobody else's do;
uploads no message names go once they are old enough."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from apps.sessions.models import Message
from apps.sessions.services import message_send
from apps.storage.cleanup import orphans_purge, unsent_uploads_purge
from apps.storage.models import PendingUpload
from apps.storage.presign import presign_for_user
from apps.storage.store import build_store

pytestmark = pytest.mark.django_db


@pytest.fixture
def store(tmp_path):
    """A store of this test's own: the shared one holds other tests' objects, whose users the
    database has already rolled back."""
    return build_store({**settings.RTC_OBJECT_STORE, "BACKEND": "local", "ROOT": str(tmp_path)})


def test_a_deleted_users_objects_are_removed_and_nobody_elses(make_user, store) -> None:
    def _keys(prefix: str) -> list[str]:
        return [o.key for o in store.list(prefix).objects]

    gone, kept = make_user(), make_user()
    for user in (gone, kept):
        store.put(f"user-{user.id}/a.txt", b"a")
        store.put(f"user-{user.id}/dir/b.txt", b"b")
        store.put(f"_derived/{user.id}/x.jpg", b"x")
    store.put("user-notanid/c.txt", b"c")  # not a user's prefix: left alone
    gone_id = gone.id
    gone.delete()
    assert orphans_purge(store) == 3
    assert _keys(f"user-{gone_id}/") == [] and _keys(f"_derived/{gone_id}/") == []
    assert _keys(f"user-{kept.id}/") == [f"user-{kept.id}/a.txt", f"user-{kept.id}/dir/b.txt"]
    assert _keys(f"_derived/{kept.id}/") == [f"_derived/{kept.id}/x.jpg"]
    assert _keys("user-notanid/") == ["user-notanid/c.txt"]
    assert orphans_purge(store) == 0


def _presign_put(user, key: str) -> None:
    presign_for_user(user_id=user.id, family_id=None, operation="put", key=key, expires_in=900,
                     base_url="http://testserver")


def test_uploads_no_message_names_are_removed_once_old_enough(make_user, store) -> None:
    user, other = make_user(), make_user()
    up = f"user-{user.id}/uploads/"
    sent, deleted_msg, cancelled, fresh = (f"{up}{n}.txt" for n in ("sent", "del", "gone", "new"))
    own = f"user-{user.id}/notes/mine.txt"  # outside uploads/: never a pending upload
    theirs = f"user-{other.id}/uploads/gone.txt"
    for key in (sent, deleted_msg, cancelled, fresh, own, theirs):
        store.put(key, b"data")
    for key in (sent, deleted_msg, cancelled, fresh):
        _presign_put(user, key)
    _presign_put(other, theirs)
    _presign_put(user, own)
    assert not PendingUpload.objects.filter(key=own).exists()
    assert PendingUpload.objects.count() == 5
    for key in (sent, deleted_msg):
        message_send(user_id=user.id, device_id="", client_id=str(uuid.uuid4()),
                     content={"type": "user_message", "data": {"text": "see file", "files": [
                         {"fileid": key, "mimetype": "text/plain"}]}})
    Message.objects.filter(content__data__files__0__fileid=deleted_msg).update(
        deleted_at=timezone.now())
    # The other user's message naming this user's key does not keep it.
    message_send(user_id=other.id, device_id="", client_id=str(uuid.uuid4()),
                 content={"type": "user_message", "data": {"text": "x", "files": [
                     {"fileid": f"user-{other.id}/uploads/elsewhere.txt",
                      "mimetype": "text/plain"}]}})
    old = timezone.now() - timedelta(hours=25)
    PendingUpload.objects.exclude(key=fresh).update(created_at=old)

    assert unsent_uploads_purge(store) == 2  # the cancelled one and the other user's
    keys = {o.key for o in store.list("user-").objects}
    assert keys == {sent, deleted_msg, fresh, own}
    assert list(PendingUpload.objects.values_list("key", flat=True)) == [fresh]
    # A fresh one waits for its time; presigning it again restarts its clock.
    assert unsent_uploads_purge(store) == 0
    _presign_put(user, fresh)
    assert unsent_uploads_purge(store, older_than=3600) == 0
    assert unsent_uploads_purge(store, older_than=0) == 1
    assert not store.list(up + "new").objects and not PendingUpload.objects.exists()
