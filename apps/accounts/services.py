"""Account services: the development admin login."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password
from django.db import IntegrityError, transaction

DEV_ADMIN_EMAIL = "admin@localhost"
DEV_ADMIN_FILE = "dev-admin.txt"


class DevAdminConflict(Exception):
    """``admin@localhost`` exists but is not a superuser; we will not promote it silently."""


@dataclass(frozen=True)
class DevAdminLogin:
    """What ``dev_admin_ensure`` found or did.

    ``password`` is set only when it is known to work (just created, or stored and still valid);
    ``stale`` says a stored password no longer matches; ``superusers`` lists the existing ones
    when there is no stored login for any of them.
    """

    path: Path
    created: bool = False
    email: str | None = None
    password: str | None = None
    stale: bool = False
    superusers: list[str] = field(default_factory=list)


def _write_secret(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read_stored(path: Path) -> tuple[str, str] | None:
    try:
        lines = path.read_text().splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    if len(lines) < 2 or not lines[0] or not lines[1]:
        return None
    return lines[0].strip(), lines[1]


def dev_admin_ensure(*, var_dir: Path) -> DevAdminLogin:
    """Create ``admin@localhost`` with a random password when there is no superuser at all.

    The password is written to ``<var_dir>/dev-admin.txt`` (mode 0600) in the same transaction,
    so a failed write leaves no admin behind. When a superuser exists nothing is changed: the
    stored login is returned if its user is still an active superuser.
    """
    user_model = get_user_model()
    path = Path(var_dir) / DEV_ADMIN_FILE
    try:
        with transaction.atomic():
            if not user_model._default_manager.filter(is_superuser=True).exists():
                if user_model._default_manager.filter(email=DEV_ADMIN_EMAIL).exists():
                    raise DevAdminConflict(
                        f"{DEV_ADMIN_EMAIL} exists but is not a superuser; "
                        "promote it or create one with `manage.py createsuperuser`"
                    )
                password = secrets.token_urlsafe(18)
                user_model._default_manager.create_superuser(DEV_ADMIN_EMAIL, password)
                _write_secret(path, f"{DEV_ADMIN_EMAIL}\n{password}\n")
                return DevAdminLogin(
                    path=path, created=True, email=DEV_ADMIN_EMAIL, password=password
                )
    except IntegrityError:
        pass  # a concurrent run created it first; report what is there now

    stored = _read_stored(path)
    if stored is not None:
        email, password = stored
        user = user_model._default_manager.filter(
            email=email, is_superuser=True, is_active=True
        ).first()
        if user is not None:
            # hashers.check_password, not user.check_password: the latter may re-hash and save.
            if check_password(password, user.password):
                return DevAdminLogin(path=path, email=email, password=password)
            return DevAdminLogin(path=path, email=email, stale=True)
    superusers = list(
        user_model._default_manager.filter(is_superuser=True)
        .order_by("pk")
        .values_list("email", flat=True)
    )
    return DevAdminLogin(path=path, superusers=superusers)


# --- revocation and deactivation ------------------------------------------------------------


def user_revoke_tokens(*, user_id: int) -> bool:
    """Refuse every token issued to the user so far (access and refresh, on HTTP, on the gateway
    and at refresh) and close the user's open sockets after commit. Returns whether the user
    exists. Tokens carry ``iat`` in whole seconds, so one issued in the same second as the
    revocation is refused too: the client logs in again."""
    from django.utils import timezone

    from apps.gateway.events import disconnect_user

    with transaction.atomic():
        found = get_user_model().objects.filter(pk=user_id).update(
            tokens_valid_after=timezone.now()
        )
        if found:
            transaction.on_commit(
                lambda: disconnect_user(user_id, reason="tokens revoked"), robust=True
            )
    return bool(found)


def user_set_active(*, user_id: int, active: bool) -> bool:
    """Activate or deactivate a user; a deactivated user's sockets are closed after commit."""
    from apps.gateway.events import disconnect_user

    with transaction.atomic():
        found = get_user_model().objects.filter(pk=user_id).update(is_active=active)
        if found and not active:
            transaction.on_commit(
                lambda: disconnect_user(user_id, reason="user deactivated"), robust=True
            )
    return bool(found)
