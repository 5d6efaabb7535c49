"""Access and refresh JWTs signed by the keyring (``apps.accounts.keys``).

Every token carries ``kid`` in its header and ``aud``, ``iss``, ``exp``, ``iat``, ``jti``,
``token_type`` and ``sub`` (the user id as a string) in its claims. Verification looks the ``kid``
up in the keyring and checks the signature with that key's own algorithm only, so ``alg: none``,
HMAC "signed" with a public key, unknown keys and algorithm switches are all refused; ``aud``,
``iss`` and ``exp`` are checked with the configured leeway (``SIMPLE_JWT``), and ``sub`` must be a
user id written as ``str(user.pk)`` writes it (``valid_subject``).

``decode_access_token`` is the fast path for the realtime gateway: no database, and
``TokenExpired`` only for a token that would otherwise be valid.

Tokens issued at login carry ``fid``, the id of their refresh-token family
(``apps.accounts.models.TokenFamily``), in the refresh token and in every access token derived
from it; ``issue_token_pair`` starts a family (one database write) through
``apps.accounts.services.token_family_start``.
"""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import timedelta
from typing import Any

import jwt
import orjson
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ImproperlyConfigured
from django.utils.timezone import now
from django.utils.translation import gettext_lazy as _
from rest_framework_simplejwt.backends import TokenBackend
from rest_framework_simplejwt.exceptions import TokenBackendError, TokenBackendExpiredToken
from rest_framework_simplejwt.settings import api_settings
from rest_framework_simplejwt.tokens import AccessToken as BaseAccessToken
from rest_framework_simplejwt.tokens import RefreshToken as BaseRefreshToken

from .keys import Keyring, get_keyring

__all__ = [
    "FAMILY_CLAIM",
    "AccessToken",
    "KeyringTokenBackend",
    "RefreshToken",
    "TokenExpired",
    "TokenInvalid",
    "TokenWrongType",
    "decode_access_token",
    "decode_any_token",
    "decode_refresh_token",
    "get_token_backend",
    "issue_access_token",
    "issue_token_pair",
    "jti_hash",
    "valid_subject",
]

REQUIRED_CLAIMS = ("exp", "iat", "aud", "iss", "sub")
FAMILY_CLAIM = "fid"  # the refresh-token family (TokenFamily.id) a token descends from
MAX_USER_ID = 2**63 - 1  # BigAutoField
_SUBJECT = re.compile(r"[1-9][0-9]{0,18}")


def valid_subject(sub: object) -> bool:
    """Whether ``sub`` is a user id exactly as the server writes one: a positive decimal string
    in the primary key's range, without sign, padding, leading zeros, ``_`` or non-ASCII digits
    (all of which ``int()`` accepts). Anything else would reach the ORM as a lookup it cannot
    take (a 500) or name a user by a spelling the server never issued."""
    return isinstance(sub, str) and bool(_SUBJECT.fullmatch(sub)) and int(sub) <= MAX_USER_ID


class TokenExpired(Exception):
    """The token is genuine and addressed to us, but its ``exp`` has passed (beyond the leeway)."""


class TokenInvalid(Exception):
    """Anything else wrong with a token: signature, key, algorithm, claims, type or format."""


class TokenWrongType(TokenInvalid):
    """A genuine token of the other type (an access token presented as a refresh token)."""


class KeyringTokenBackend(TokenBackend):
    """simplejwt's backend, signing with the keyring's active key and verifying by ``kid``."""

    def __init__(
        self, keyring: Keyring, *, audience: str, issuer: str, leeway: timedelta | int | float
    ) -> None:
        super().__init__(
            keyring.signing.algorithm,
            signing_key=None,
            audience=audience,
            issuer=issuer,
            leeway=leeway,
            json_encoder=api_settings.JSON_ENCODER,
        )
        self.keyring = keyring

    def encode(self, payload: dict[str, Any]) -> str:
        key = self.keyring.signing
        claims = {**payload, "aud": self.audience, "iss": self.issuer}
        return jwt.encode(
            claims,
            key.private_key,
            algorithm=key.algorithm,
            headers={"kid": key.kid},
            json_encoder=self.json_encoder,
        )

    def decode(self, token: Any, verify: bool = True) -> dict[str, Any]:
        """Verified claims. The signature is always checked; ``verify=False`` only skips ``exp``."""
        claims = self.verified_claims(token)
        if verify:
            self.check_exp(claims)
        return claims

    def verified_claims(self, token: Any) -> dict[str, Any]:
        """Check signature, ``kid``, ``alg``, ``aud``, ``iss``, ``iat``, presence and the form of
        ``sub``; not ``exp``."""
        try:
            header = _unverified_header(token)
            kid = header.get("kid")
            key = self.keyring.get(kid) if isinstance(kid, str) else None
            if key is None:
                raise TokenBackendError(_("Token is invalid"))
            # The key decides the algorithm; a header asking for another one is an attack.
            if header.get("alg") != key.algorithm:
                raise TokenBackendError(_("Invalid algorithm specified"))
            claims: dict[str, Any] = jwt.decode(
                token,
                key.public_key,
                algorithms=[key.algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.get_leeway(),
                options={"require": list(REQUIRED_CLAIMS), "verify_exp": False},
            )
        except (jwt.InvalidTokenError, ValueError, TypeError) as exc:
            raise TokenBackendError(_("Token is invalid")) from exc
        if not valid_subject(claims.get(api_settings.USER_ID_CLAIM)):
            raise TokenBackendError(_("Token is invalid"))
        return claims

    def check_exp(self, claims: dict[str, Any]) -> None:
        exp = claims.get("exp")
        if isinstance(exp, bool) or not isinstance(exp, int | float):
            raise TokenBackendError(_("Token is invalid"))
        if exp <= (now() - self.get_leeway()).timestamp():
            raise TokenBackendExpiredToken(_("Token is expired"))


def _unverified_header(token: str | bytes) -> dict[str, Any]:
    """The token's header, only to pick the key: ``jwt.decode`` then checks the whole token.

    Not ``jwt.get_unverified_header``, which checks every character of all three segments in
    Python (PyJWT 2.15) before ``jwt.decode`` does it again: 127 against 89 us a token, every
    connect and refresh (docs/performance.md)."""
    raw = token.encode() if isinstance(token, str) else token  # DRF's header gives bytes
    head = raw.split(b".", 1)[0]
    header = orjson.loads(base64.urlsafe_b64decode(head + b"=" * (-len(head) % 4)))
    if not isinstance(header, dict):
        raise TypeError("the token's header is not an object")
    return header


_backend: tuple[tuple[Any, ...], KeyringTokenBackend] | None = None


def get_token_backend() -> KeyringTokenBackend:
    """The backend for the current keyring and SIMPLE_JWT settings (cached while they hold)."""
    global _backend
    keyring = get_keyring()
    config = (id(keyring), api_settings.AUDIENCE, api_settings.ISSUER, api_settings.LEEWAY)
    cached = _backend
    if cached is not None and cached[0] == config and cached[1].keyring is keyring:
        return cached[1]
    if not api_settings.AUDIENCE or not api_settings.ISSUER:
        raise ImproperlyConfigured("SIMPLE_JWT must set AUDIENCE and ISSUER explicitly")
    backend = KeyringTokenBackend(
        keyring,
        audience=api_settings.AUDIENCE,
        issuer=api_settings.ISSUER,
        leeway=api_settings.LEEWAY,
    )
    _backend = (config, backend)
    return backend


class _KeyringTokenMixin:
    @property
    def token_backend(self) -> KeyringTokenBackend:
        return get_token_backend()

    def get_token_backend(self) -> KeyringTokenBackend:
        return get_token_backend()


class AccessToken(_KeyringTokenMixin, BaseAccessToken):
    """An access token (``token_type: access``) signed by the keyring."""


class RefreshToken(_KeyringTokenMixin, BaseRefreshToken):
    """A refresh token; ``.access_token`` derives an ``AccessToken`` with the same claims."""

    access_token_class = AccessToken


def issue_access_token(
    user: AbstractBaseUser, *, lifetime: timedelta | None = None, device_id: str = "",
    claims: dict[str, Any] | None = None,
) -> str:
    """A signed access token for ``user``; ``lifetime`` overrides the configured one (may be
    negative, for an already expired token), ``device_id`` is added as a claim when given, and
    ``claims`` (``act``, ``fid``, ...) are added before the one signature."""
    token = AccessToken.for_user(user)
    if lifetime is not None:
        token.set_exp(lifetime=lifetime)
    if device_id:
        token["device_id"] = device_id
    for name, value in (claims or {}).items():
        token[name] = value
    return str(token)


def issue_token_pair(user: AbstractBaseUser, *, device_id: str = "") -> dict[str, str]:
    """``{"access", "refresh"}`` for ``user`` in a new refresh-token family (a login): both
    expire relative to the same instant and carry the family id ``fid``. Writes to the
    database (the family and the hash of the refresh token's ``jti``)."""
    from .services import token_family_start

    return token_family_start(user=user, device_id=device_id)


def jti_hash(jti: str) -> str:
    """What the database keeps of a refresh token: the SHA-256 of its ``jti`` (hex)."""
    return hashlib.sha256(jti.encode()).hexdigest()


def _decode_typed(token: object, token_type: str, *, check_exp: bool) -> dict[str, Any]:
    if not isinstance(token, str) or not token:
        raise TokenInvalid("no token")
    try:
        backend = get_token_backend()
        claims = backend.verified_claims(token)
        if claims.get(api_settings.TOKEN_TYPE_CLAIM) != token_type:
            raise TokenWrongType(f"not a token of type {token_type}")
        jti = claims.get(api_settings.JTI_CLAIM)
        if not jti or (token_type == RefreshToken.token_type and not isinstance(jti, str)):
            raise TokenInvalid("token has no id")
        if check_exp:
            backend.check_exp(claims)
    except TokenBackendExpiredToken as exc:
        raise TokenExpired("token expired") from exc
    except TokenBackendError as exc:
        raise TokenInvalid("token invalid") from exc
    return claims


def decode_refresh_token(token: object, *, check_exp: bool = True) -> dict[str, Any]:
    """The verified claims of a refresh token (no database); ``check_exp=False`` accepts an
    expired one (logout, revocation). Raises ``TokenExpired`` or ``TokenInvalid`` like
    ``decode_access_token``; an access token is ``TokenInvalid``."""
    return _decode_typed(token, RefreshToken.token_type, check_exp=check_exp)


def decode_any_token(token: object) -> dict[str, Any] | None:
    """The verified claims of any token of ours, expired or not, or ``None`` (revocation)."""
    if not isinstance(token, str) or not token:
        return None
    try:
        return get_token_backend().verified_claims(token)
    except TokenBackendError:
        return None


def decode_access_token(token: str) -> dict[str, Any]:
    """The verified claims of an access token, without touching the database.

    Raises ``TokenExpired`` when the token is valid in every respect but ``exp`` (leeway
    included), ``TokenInvalid`` for everything else. Whether the user still exists or is active
    is the caller's business.
    """
    return _decode_typed(token, AccessToken.token_type, check_exp=True)
