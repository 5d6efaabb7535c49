"""Account services: the development admin login, revocation and deactivation, and the
refresh-token families (login, rotation with reuse detection, logout, RFC 7009 revocation) and
the purge of what has expired."""

from __future__ import annotations

import os
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password
from django.db import IntegrityError, transaction
from django.utils import timezone

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
    and at refresh), revoke every refresh-token family, and close the user's open sockets
    after commit. Returns whether the user
    exists. Tokens carry ``iat`` in whole seconds, so one issued in the same second as the
    revocation is refused too: the client logs in again."""
    from apps.gateway.events import disconnect_user

    from .models import TokenFamily

    with transaction.atomic():
        found = get_user_model().objects.filter(pk=user_id).update(
            tokens_valid_after=timezone.now()
        )
        if found:
            TokenFamily.objects.filter(user_id=user_id, revoked_at__isnull=True).update(
                revoked_at=timezone.now(), revoked_reason="all revoked"
            )
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


# --- refresh-token families (rotation, reuse detection, logout, RFC 7009) ----------------------


class RefreshRefused(Exception):
    """A refresh was refused; ``code`` goes on the wire (401 ``{"detail", "code"}``)."""

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
        super().__init__(detail)


def _issue_in_family(*, user: Any, family_id: Any, device_id: str) -> dict[str, str]:
    from .models import RefreshTokenRecord
    from .tokens import FAMILY_CLAIM, RefreshToken, jti_hash

    refresh = RefreshToken.for_user(user)
    refresh[FAMILY_CLAIM] = str(family_id)
    if device_id:
        refresh["device_id"] = device_id
    RefreshTokenRecord.objects.create(
        jti_hash=jti_hash(refresh["jti"]),
        family_id=family_id,
        expires_at=datetime.fromtimestamp(refresh["exp"], tz=UTC),
    )
    return {"access": str(refresh.access_token), "refresh": str(refresh)}


def token_family_start(*, user: Any, device_id: str = "") -> dict[str, str]:
    """A login: a new family and its first ``{"access", "refresh"}`` (both carry ``fid``).
    Only the SHA-256 of the refresh token's ``jti`` is stored."""
    from .models import TokenFamily

    with transaction.atomic():
        family = TokenFamily.objects.create(user_id=user.pk, device_id=device_id)
        return _issue_in_family(user=user, family_id=family.pk, device_id=device_id)


def token_family_revoke(*, family_id: Any, reason: str, user_id: int | None = None) -> bool:
    """Revoke one family: its refresh tokens are refused at refresh and every access token
    carrying its ``fid`` on HTTP and the gateway (its sockets close at once after commit, or at
    their next ping tick if that bell is lost, ``identity_valid``). Other families of the same
    user are untouched. Idempotent; returns whether this call revoked it. ``user_id``, when
    given, must own the family."""
    from .models import TokenFamily

    try:
        fid = uuid.UUID(str(family_id))
    except ValueError:
        return False
    from apps.gateway.events import disconnect_user

    families = TokenFamily.objects.filter(pk=fid, revoked_at__isnull=True)
    if user_id is not None:
        families = families.filter(user_id=user_id)
    owner = families.values_list("user_id", flat=True).first()
    if owner is None or not families.update(revoked_at=timezone.now(), revoked_reason=reason[:32]):
        return False
    # The socket of this login closes at once (the per-tick re-check is the fallback).
    transaction.on_commit(
        lambda: disconnect_user(owner, reason="tokens revoked", family_id=str(fid)), robust=True
    )
    return True


def refresh_token_rotate(*, token: object) -> dict[str, str]:
    """Use up a refresh token: ``{"access", "refresh"}``, the next pair of its family.

    The token is marked used by one conditional UPDATE, so of two concurrent uses exactly one
    wins. A token already used is a replay (RFC 9700 §4.14.2: the legitimate client and an
    attacker cannot be told apart), so its whole family is revoked and ``token_reused`` raised.
    Raises ``RefreshRefused`` with ``token_not_valid``, ``no_active_account``,
    ``token_revoked`` or ``token_reused``."""
    from rest_framework_simplejwt.settings import api_settings

    from .models import RefreshTokenRecord
    from .selectors import user_token_valid
    from .tokens import (
        FAMILY_CLAIM,
        TokenExpired,
        TokenInvalid,
        TokenWrongType,
        decode_refresh_token,
        jti_hash,
    )

    try:
        claims = decode_refresh_token(token)
    except TokenWrongType:
        raise RefreshRefused("token_not_valid", "Token has wrong type") from None
    except TokenExpired:
        raise RefreshRefused("token_not_valid", "Token is expired") from None
    except TokenInvalid:
        raise RefreshRefused("token_not_valid", "Token is invalid") from None
    fid = claims.get(FAMILY_CLAIM)
    try:
        family_id = uuid.UUID(fid) if isinstance(fid, str) else None
        issued_at = float(claims.get("iat") or 0)
    except (TypeError, ValueError):
        family_id = None
    if family_id is None:  # issued before families existed, or not by a login
        raise RefreshRefused("token_not_valid", "Token is invalid")
    user = get_user_model()._default_manager.filter(pk=int(claims["sub"])).first()
    if not api_settings.USER_AUTHENTICATION_RULE(user):
        raise RefreshRefused(
            "no_active_account", "No active account found for the given token."
        )
    if not user_token_valid(user_id=user.pk, issued_at=issued_at, family_id=family_id):
        raise RefreshRefused("token_revoked", "the token was revoked")
    digest = jti_hash(claims["jti"])
    with transaction.atomic():
        won = RefreshTokenRecord.objects.filter(
            jti_hash=digest,
            family_id=family_id,
            family__user_id=user.pk,
            family__revoked_at__isnull=True,
            used_at__isnull=True,
        ).update(used_at=timezone.now())
        if won:
            return _issue_in_family(
                user=user, family_id=family_id, device_id=str(claims.get("device_id") or "")
            )
    if RefreshTokenRecord.objects.filter(jti_hash=digest, family_id=family_id).exists():
        token_family_revoke(family_id=family_id, reason="reuse", user_id=user.pk)
        raise RefreshRefused("token_reused", "refresh token already used: its login is revoked")
    raise RefreshRefused("token_not_valid", "Token is invalid")


def refresh_token_logout(*, token: object) -> None:
    """Logout: revoke the family of a refresh token of ours (expired or used ones too, so a
    client can always end its login). Raises ``RefreshRefused("token_not_valid")`` for
    anything that is not one of our refresh tokens with a family."""
    from .tokens import FAMILY_CLAIM, TokenExpired, TokenInvalid, decode_refresh_token

    try:
        claims = decode_refresh_token(token, check_exp=False)
    except (TokenExpired, TokenInvalid):
        raise RefreshRefused("token_not_valid", "Token is invalid") from None
    if not isinstance(claims.get(FAMILY_CLAIM), str):
        raise RefreshRefused("token_not_valid", "Token is invalid")
    token_family_revoke(
        family_id=claims[FAMILY_CLAIM], reason="logout", user_id=int(claims["sub"])
    )


def token_revoke(*, token: object, token_type_hint: str = "") -> None:
    """RFC 7009: revoke the family of an access or refresh token of ours. The hint is only a
    hint (§2.1: a wrong one must not stop the search, and both types are found the same way);
    unknown, forged, expired-and-familyless tokens are ignored, since the answer is the same
    200 whatever happened (§2.2)."""
    from .tokens import FAMILY_CLAIM, decode_any_token

    claims = decode_any_token(token)
    if claims is None or not isinstance(claims.get(FAMILY_CLAIM), str):
        return
    token_family_revoke(
        family_id=claims[FAMILY_CLAIM], reason="revoked", user_id=int(claims["sub"])
    )


# --- purge ------------------------------------------------------------------------------------

PURGE_GRACE = timedelta(days=1)
PURGE_BATCH = 1000


def _delete_batches(queryset: Any, *, batch: int) -> int:
    """Delete the rows of ``queryset`` ``batch`` primary keys at a time (short transactions,
    short locks); returns how many went."""
    total = 0
    while True:
        pks = list(queryset.values_list("pk", flat=True)[:batch])
        if not pks:
            return total
        queryset.model.objects.filter(pk__in=pks).delete()
        total += len(pks)


def tokens_purge(*, batch: int = PURGE_BATCH) -> dict[str, int]:
    """Delete what can no longer be used, in batches: refresh-token records and authorization
    codes expired more than a day ago, then families revoked more than a day ago (with their
    records) and families over a day old with no record left. A token of a deleted family is
    refused like one of a revoked family (``user_token_valid`` needs the family to exist), and a
    day is far past any access token's lifetime. Run by the worker's sweep every 10 minutes."""
    from django.db.models import Exists, OuterRef, Q

    from .models import AuthorizationCode, RefreshTokenRecord, TokenFamily

    cutoff = timezone.now() - PURGE_GRACE
    done = {
        "refresh_tokens": _delete_batches(
            RefreshTokenRecord.objects.filter(expires_at__lt=cutoff), batch=batch),
        "authorization_codes": _delete_batches(
            AuthorizationCode.objects.filter(expires_at__lt=cutoff), batch=batch),
    }
    records = RefreshTokenRecord.objects.filter(family=OuterRef("pk"))
    dead = TokenFamily.objects.filter(
        Q(revoked_at__lt=cutoff) | Q(created_at__lt=cutoff) & ~Exists(records)
    )
    done["families"] = _delete_batches(dead, batch=batch)
    return done
