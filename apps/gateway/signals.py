"""Close a user's sockets when the user is deleted or deactivated by any path (the admin, a
shell, a cascade), not only through ``apps.accounts.services``. The receivers only schedule the
after-commit bell; what a connection may do is decided by ``user_token_valid``."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from .events import disconnect_user


def user_saved(sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
    if not created and not instance.is_active:
        uid = instance.pk
        transaction.on_commit(lambda: disconnect_user(uid, reason="user deactivated"),
                              robust=True)


def user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    uid = instance.pk
    transaction.on_commit(lambda: disconnect_user(uid, reason="user deleted"), robust=True)
