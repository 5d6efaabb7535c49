"""OAuth2 authorization code with PKCE (RFC 6749 §4.1, RFC 7636 S256 only): the code store and
the ``authorization_code`` and ``refresh_token`` grants of ``/oauth2/token``.

Guarantees:

- Redirect URIs match a client's registered ones exactly (string equality: no prefix, no case
  folding, no normalisation, no extra query or fragment); ``redirect_uri_check`` is the one place.
- A code is 256 random bits shown once; only its SHA-256 is stored, with the client, the exact
  redirect URI, the S256 challenge, the device and a short TTL (``RTC_OAUTH_CODE_SECONDS``, 60 s).
- A code is used at most once: the exchange locks its row, checks everything, marks it used and
  issues a login (``issue_token_pair``, a new refresh-token family) in one transaction. A code
  presented again is refused and the family it issued is revoked (RFC 6749 §4.1.2).
- A refused exchange issues nothing; only a reuse writes (the revocation).
- The issued tokens carry the ``device_id`` given to ``/oauth2/authorize``; the device is upserted.

Protocol code is written here rather than taken from django-oauth-toolkit for the reason given in
``apps.accounts.oauth``: our tokens are keyring JWTs in refresh-token families, not DOT's opaque
database tokens. The PKCE check itself is one SHA-256 and a constant-time comparison.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from rest_framework_simplejwt.settings import api_settings

from .models import AuthorizationCode, Device, OAuthClient
from .oauth import InvalidGrant, InvalidRequest, TokenRequest, grant
from .services import RefreshRefused, refresh_token_rotate, token_family_revoke
from .tokens import FAMILY_CLAIM, decode_refresh_token, issue_token_pair

AUTHORIZATION_CODE = "authorization_code"
REFRESH_TOKEN = "refresh_token"  # noqa: S105 - a grant_type name
# RFC 7636 §4.1: 43..128 unreserved characters; an S256 challenge is 43 base64url characters.
_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")
DEVICE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def code_seconds() -> int:
    return int(getattr(settings, "RTC_OAUTH_CODE_SECONDS", 60))


def _hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def s256(verifier: str) -> str:
    """The S256 challenge of a verifier: ``BASE64URL(SHA256(ASCII(verifier)))`` unpadded."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass(frozen=True)
class AuthorizeClient:
    """A client allowed to start the authorization-code flow."""

    client_id: str
    name: str
    redirect_uris: tuple[str, ...]


def authorize_client(client_id: str) -> AuthorizeClient | None:
    """The active client registered for ``authorization-code``, or ``None``."""
    if not client_id or len(client_id) > 64:
        return None
    row = OAuthClient.objects.filter(client_id=client_id, is_active=True).first()
    if row is None or OAuthClient.Grant.AUTHORIZATION_CODE not in (row.grants or []):
        return None
    uris = tuple(u for u in (row.redirect_uris or []) if isinstance(u, str))
    return AuthorizeClient(client_id=row.client_id, name=row.name, redirect_uris=uris)


def redirect_uri_check(client: AuthorizeClient, redirect_uri: str) -> bool:
    """Exact string comparison with a registered URI (RFC 9700 §4.1.3); a fragment is never
    allowed (RFC 6749 §3.1.2)."""
    return bool(redirect_uri) and "#" not in redirect_uri and redirect_uri in client.redirect_uris


def challenge_valid(challenge: str) -> bool:
    return bool(_CHALLENGE.fullmatch(challenge))


def authorization_code_create(
    *, client_id: str, user: Any, redirect_uri: str, code_challenge: str, device_id: str = "",
    scope: str = "",
) -> str:
    """A new code for ``user`` (the caller has checked client, redirect URI and challenge)."""
    code = secrets.token_urlsafe(32)
    now = timezone.now()
    AuthorizationCode.objects.create(
        code_hash=_hash(code), client_id=client_id, user=user, redirect_uri=redirect_uri,
        code_challenge=code_challenge, device_id=device_id, scope=scope[:500], created_at=now,
        expires_at=now + timedelta(seconds=code_seconds()),
    )
    return code


def _token_response(pair: dict[str, str]) -> dict[str, Any]:
    return {
        "access_token": pair["access"],
        "token_type": "Bearer",
        "expires_in": int(api_settings.ACCESS_TOKEN_LIFETIME.total_seconds()),
        "refresh_token": pair["refresh"],
    }


@grant(AUTHORIZATION_CODE, client_grant=OAuthClient.Grant.AUTHORIZATION_CODE)
def authorization_code(request: TokenRequest) -> dict[str, Any]:
    """``{access_token, token_type, expires_in, refresh_token}`` for a code issued to this
    client for this redirect URI, whose challenge the ``code_verifier`` answers."""
    code, verifier = request.get("code"), request.get("code_verifier")
    redirect_uri = request.get("redirect_uri")
    if not code or not redirect_uri:
        raise InvalidRequest("code and redirect_uri are required")
    if not verifier:
        raise InvalidRequest("code_verifier is required")
    if not _VERIFIER.fullmatch(verifier):
        raise InvalidRequest("code_verifier must be 43 to 128 unreserved characters")
    reused_family = None
    with transaction.atomic():
        row = (AuthorizationCode.objects.select_for_update().select_related("user")
               .filter(code_hash=_hash(code)).first())
        if row is None:
            raise InvalidGrant("unknown authorization code")
        if row.used_at is not None:
            reused_family = row.family_id
        else:
            if row.client_id != request.client.client_id:
                raise InvalidGrant("the code was issued to another client")
            if row.expires_at <= timezone.now():
                raise InvalidGrant("the code has expired")
            if row.redirect_uri != redirect_uri:
                raise InvalidGrant("redirect_uri differs from the authorization request's")
            if not hmac.compare_digest(s256(verifier), row.code_challenge):
                raise InvalidGrant("code_verifier does not match the code_challenge")
            device = request.get("device_id")
            if device and device != row.device_id:
                raise InvalidGrant("device_id differs from the authorization request's")
            if not row.user.is_active:
                raise InvalidGrant("the user is inactive")
            pair = issue_token_pair(row.user, device_id=row.device_id)
            if row.device_id:
                Device.objects.update_or_create(user=row.user, device_id=row.device_id)
            fid = decode_refresh_token(pair["refresh"]).get(FAMILY_CLAIM)
            AuthorizationCode.objects.filter(pk=row.pk).update(
                used_at=timezone.now(), family_id=fid
            )
            return _token_response(pair)
    # Outside the transaction above, so that the revocation commits with the refusal.
    if reused_family is not None:
        token_family_revoke(family_id=reused_family, reason="code_reuse")
    raise InvalidGrant("the authorization code was already used; its tokens are revoked")


@grant(REFRESH_TOKEN, client_grant=OAuthClient.Grant.AUTHORIZATION_CODE)
def refresh_token(request: TokenRequest) -> dict[str, Any]:
    """RFC 6749 §6: rotate a refresh token (single use, reuse revokes its family; see
    ``services.refresh_token_rotate``). The answer has the new refresh token."""
    token = request.get("refresh_token")
    if not token:
        raise InvalidRequest("refresh_token is required")
    try:
        pair = refresh_token_rotate(token=token)
    except RefreshRefused as exc:
        raise InvalidGrant(exc.detail) from None
    return _token_response(pair)
