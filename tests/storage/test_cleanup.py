"""The sweep's clean-up: a deleted user's uploads and derived objects go; nobody else's do."""

from __future__ import annotations

import pytest
from django.conf import settings

from apps.storage.cleanup import orphans_purge
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
