"""Temporary S3 credentials and the scope they grant: services, selectors and the key rules.

* A credential is a row (``S3Credential``) naming a user, an expiry and, for client credentials,
  the SHA-256 of its session token. Its secret access key is never stored: it is an HMAC of the
  access key id under ``SECRET_KEY`` (``credential_secret``), so only this server can sign with
  it or check a signature. Rotating ``SECRET_KEY`` therefore ends every credential.
* A credential is honoured only while it is not expired, not revoked, its user is active, it was
  created after the user's ``tokens_valid_after`` (``user_revoke_tokens``) and the login it was
  obtained with (refresh-token family) is not revoked.
* Client credentials go to the caller (``/api/credentials/temporary``); presign credentials stay
  on the server and only sign presigned URLs of their user (reused while their life suffices);
  the service credential (no row; secret derived the same way) signs the local store's
  presigned URLs for any key. The last two are honoured only for a presigned GET, HEAD or PUT
  of one object.
* Scope: every key a user may name lies under ``user-<id>/`` and passes ``check_key``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import unquote

from django.db.models import F, Q
from django.utils import timezone
from django.utils.crypto import salted_hmac

from rtcagent.conf import rtc_setting

from .base import InvalidKey
from .base import check_key as store_check_key
from .models import S3Credential

ACCESS_KEY_PREFIX = "RTCA"  # client and presign credentials: RTCA + 16 base32 characters
SERVICE_ACCESS_KEY_ID = "RTCSERVICE0000000000"  # never matches ACCESS_KEY_PREFIX
_DERIVATION_SALT = "apps.storage.credentials.secret"


# --- the scope: prefixes and keys ------------------------------------------------------------


def user_prefix(user_id: object) -> str:
    """The key prefix of a user's objects (the id is the access token's ``sub``)."""
    return f"user-{user_id}/"


def check_key(key: str) -> str:
    """``key`` if a user may name it, else ``InvalidKey`` (S3 ``InvalidArgument``) saying why:
    the store's rule (``base.check_key``: at most 1024 UTF-8 bytes, no NUL, control character,
    backslash, leading ``/`` or ``..`` segment), applied also to the key once percent-decoded
    (``%2e%2e``), since a proxy or a client that decodes again could otherwise turn it into a
    path that leaves the prefix."""
    store_check_key(key)
    decoded = unquote(key, errors="replace")
    if decoded != key:
        try:
            store_check_key(decoded)
        except InvalidKey as exc:
            raise InvalidKey(f"{exc} once percent-decoded") from None
    return key


def key_in_prefix(key: str, prefix: str | None) -> bool:
    """Whether ``key`` lies under ``prefix`` (``None``: the service credential, any key)."""
    return prefix is None or key.startswith(prefix)


# --- secrets ---------------------------------------------------------------------------------


def credential_secret(access_key_id: str) -> str:
    """The secret access key of ``access_key_id``: derived, never stored."""
    digest = salted_hmac(_DERIVATION_SALT, access_key_id, algorithm="sha256").digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")[:40]


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _new_access_key_id() -> str:
    return ACCESS_KEY_PREFIX + base64.b32encode(secrets.token_bytes(10)).decode("ascii")


# --- services --------------------------------------------------------------------------------


@dataclass(frozen=True)
class IssuedCredential:
    access_key_id: str
    secret_access_key: str
    session_token: str | None  # None for presign credentials (their URLs carry none)
    expires_at: datetime
    prefix: str


def credential_create(
    *,
    user_id: int,
    family_id: uuid.UUID | str | None = None,
    kind: str = S3Credential.Kind.CLIENT,
    now: datetime | None = None,
) -> IssuedCredential:
    """A new credential of ``user_id`` living ``S3_CREDENTIAL_TTL`` seconds; the secret and the
    session token are in the answer only."""
    now = now or timezone.now()
    access_key_id = _new_access_key_id()
    token = secrets.token_urlsafe(48) if kind == S3Credential.Kind.CLIENT else None
    row = S3Credential.objects.create(
        access_key_id=access_key_id,
        user_id=user_id,
        family_id=family_id,
        kind=kind,
        session_token_hash=_token_hash(token) if token else "",
        created_at=now,
        expires_at=now + timedelta(seconds=int(rtc_setting("S3_CREDENTIAL_TTL"))),
    )
    return IssuedCredential(access_key_id, credential_secret(access_key_id), token,
                            row.expires_at, user_prefix(user_id))


def presign_credential(
    *, user_id: int, family_id: uuid.UUID | str | None, min_life: int, now: datetime
) -> IssuedCredential:
    """A presign credential of the user (and login) that lives at least ``min_life`` more
    seconds: the longest-lived usable one, else a new one. Reuse keeps the table small; a
    URL never outlives the credential that signed it."""
    reusable = (
        S3Credential.objects.filter(
            user_id=user_id, family_id=family_id, kind=S3Credential.Kind.PRESIGN,
            revoked_at__isnull=True, expires_at__gte=now + timedelta(seconds=min_life),
        )
        .filter(Q(user__tokens_valid_after__isnull=True)
                | Q(created_at__gt=F("user__tokens_valid_after")))
        .order_by("-expires_at")
        .values_list("access_key_id", "expires_at")
        .first()
    )
    if reusable is not None:
        access_key_id, expires_at = reusable
        return IssuedCredential(access_key_id, credential_secret(access_key_id), None,
                                expires_at, user_prefix(user_id))
    return credential_create(user_id=user_id, family_id=family_id,
                             kind=S3Credential.Kind.PRESIGN, now=now)


def credential_revoke(*, user_id: int, access_key_id: str, reason: str = "revoked") -> bool:
    """Revoke one credential of the user; False when the user has no such live credential."""
    return bool(
        S3Credential.objects.filter(
            user_id=user_id, access_key_id=access_key_id, revoked_at__isnull=True
        ).update(revoked_at=timezone.now(), revoked_reason=reason[:64])
    )


def credentials_revoke_all(*, user_id: int, reason: str = "all revoked") -> int:
    """Revoke every credential of the user (client and presign: their URLs stop working)."""
    return S3Credential.objects.filter(user_id=user_id, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_reason=reason[:64]
    )


def credentials_purge_expired(*, now: datetime | None = None) -> int:
    """Delete credentials past their expiry (nothing can use them any more); returns how
    many. Meant for the worker's periodic sweep."""
    deleted, _ = S3Credential.objects.filter(expires_at__lt=now or timezone.now()).delete()
    return deleted


# --- selectors: who signed a request ---------------------------------------------------------


class CredentialRefused(Exception):
    """A credential that may not be used, with the S3 error code to answer."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass(frozen=True)
class Principal:
    """Who a verified request acts for. ``prefix`` None: any key (the service credential)."""

    access_key_id: str
    kind: str  # "client", "presign" or "service"
    user_id: int | None
    prefix: str | None


@dataclass(frozen=True)
class CredentialRecord:
    access_key_id: str
    kind: str
    user_id: int | None
    session_token_hash: str
    created_at: datetime | None
    expires_at: datetime | None
    revoked: bool
    user_active: bool
    tokens_valid_after: datetime | None
    family_revoked: bool


_SERVICE = CredentialRecord(SERVICE_ACCESS_KEY_ID, "service", None, "", None, None, False, True,
                            None, False)


def credential_lookup(access_key_id: str) -> CredentialRecord | None:
    """The credential named by a request (one indexed read), or None when unknown."""
    if hmac.compare_digest(access_key_id.encode(), SERVICE_ACCESS_KEY_ID.encode()):
        return _SERVICE
    if not access_key_id.startswith(ACCESS_KEY_PREFIX) or len(access_key_id) > 32:
        return None
    row = (
        S3Credential.objects.filter(access_key_id=access_key_id)
        .values_list("kind", "user_id", "session_token_hash", "created_at", "expires_at",
                     "revoked_at", "user__is_active", "user__tokens_valid_after",
                     "family__revoked_at", "family_id")
        .first()
    )
    if row is None:
        return None
    kind, user_id, token_hash, created, expires, revoked, active, valid_after, f_rev, fid = row
    return CredentialRecord(access_key_id, kind, user_id, token_hash, created, expires,
                            revoked is not None, bool(active), valid_after,
                            fid is not None and f_rev is not None)


def credential_check(
    record: CredentialRecord, *, session_token: str | None, now: datetime
) -> Principal:
    """The principal of a request whose signature ``record``'s secret verified, or
    ``CredentialRefused``. Called after the signature check, so only a holder of the secret
    learns that a credential expired or was revoked."""
    if record.kind == "service":
        return Principal(record.access_key_id, "service", None, None)
    if record.revoked or not record.user_active:
        raise CredentialRefused(
            "InvalidAccessKeyId",
            "The AWS Access Key Id you provided was revoked, or its user is inactive.", 403)
    if record.kind == S3Credential.Kind.CLIENT and not (
        session_token
        and hmac.compare_digest(_token_hash(session_token), record.session_token_hash)
    ):
        raise CredentialRefused(
            "InvalidToken", "The provided token is malformed or otherwise invalid.", 400)
    if record.expires_at is not None and now >= record.expires_at:
        raise CredentialRefused("ExpiredToken", "The provided token has expired.", 400)
    if record.family_revoked or (
        record.tokens_valid_after is not None
        and record.created_at is not None
        and record.created_at <= record.tokens_valid_after
    ):
        raise CredentialRefused(
            "ExpiredToken",
            "The provided token has expired: it was revoked with the user's tokens; log in "
            "again and ask for new credentials.", 400)
    return Principal(record.access_key_id, record.kind, record.user_id,
                     user_prefix(record.user_id))
