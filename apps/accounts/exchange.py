"""RFC 8693 token exchange: a subject token from our own keys or a trusted issuer becomes one of
our access tokens.

Guarantees:

- Only RS256, ES256 and EdDSA signatures verify, each with a key of the matching type from our
  keyring or the issuer's configured JWKS (``apps.accounts.issuers``); ``alg: none`` in any
  casing, HMAC and tokens naming their own key (``jku``, ``x5u``, ``jwk``, ``x5c``) or carrying
  ``crit`` are refused before any key is looked up, so they cause no outbound request.
- ``exp`` and ``iss`` are required, ``aud`` must be one of the issuer's audiences, ``nbf``/``iat``
  are checked with the configured leeway.
- The user is found by ``(issuer, subject)`` (``ExternalIdentity``) or created; an existing user
  with the same email is only linked when the issuer's ``merge_by_email`` says so. The device
  (``claims.device``) is upserted and the issued token carries its ``device_id``.
- Delegation: an ``actor_token`` must be an admin token of our own issuer whose user is active
  staff; the issued token records it as ``act: {"sub", "iss"}`` (RFC 8693 §4.1).
- Lifetimes are capped by ``RTC_EXCHANGE_MAX_MINUTES``, the access lifetime and the issuer's cap.
- A refused exchange writes nothing: every write happens after all checks, in one transaction.
- A confidential client also gets a ``refresh_token`` (RFC 8693 §2.2.1, "where allowed"): a new
  token family bound to the same user and device, which the site's backend rotates at
  ``/api/auth/token/refresh/``; the issued access token carries the family's ``fid``, so revoking
  either ends both. Public clients never get one, nor do delegated (``act``) or admin-subject
  exchanges: a refresh would outlive the actor's or the admin token's short grant.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from rest_framework_simplejwt.settings import api_settings

from .issuers import IssuerConfig, issuer_config, issuer_key
from .keys import get_keyring
from .models import Device, ExternalIdentity, OAuthClient
from .oauth import (
    InvalidGrant,
    InvalidRequest,
    InvalidTarget,
    TokenRequest,
    UnauthorizedClient,
    grant,
)
from .selectors import user_token_valid
from .services import token_family_start
from .tokens import (
    FAMILY_CLAIM,
    TokenExpired,
    TokenInvalid,
    decode_access_token,
    issue_access_token,
    valid_subject,
)

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
TT_ACCESS = "urn:ietf:params:oauth:token-type:access_token"
TT_JWT = "urn:ietf:params:oauth:token-type:jwt"
TT_ID = "urn:ietf:params:oauth:token-type:id_token"
SUBJECT_TYPES = (TT_ACCESS, TT_JWT, TT_ID)
ADMIN_TOKEN_TYPE = "admin"  # noqa: S105 - a claim value, not a secret
ADMIN_AUDIENCE_SUFFIX = ":admin"
_FORBIDDEN_HEADERS = ("jku", "x5u", "jwk", "x5c", "crit")
_DEVICE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def admin_audience() -> str:
    return settings.RTC_JWT_AUDIENCE + ADMIN_AUDIENCE_SUFFIX


def admin_token_issue(*, user: Any, device_id: str = "") -> str:
    """A short admin token (``RTC_ADMIN_TOKEN_SECONDS``) for a staff user's session: good only as
    the subject or actor of an exchange (its ``aud`` and ``token_type`` are not an access
    token's, so no API or socket accepts it)."""
    key = get_keyring().signing
    now = int(time.time())
    claims = {
        "iss": settings.RTC_JWT_ISSUER, "aud": admin_audience(), "sub": str(user.pk),
        "token_type": ADMIN_TOKEN_TYPE, "iat": now,
        "exp": now + int(getattr(settings, "RTC_ADMIN_TOKEN_SECONDS", 120)),
        "jti": secrets.token_hex(16),
    }
    if device_id:
        claims["device_id"] = device_id
    return jwt.encode(claims, key.private_key, algorithm=key.algorithm, headers={"kid": key.kid})


@dataclass(frozen=True)
class Subject:
    """Who a verified subject token names. ``user_id`` for our own tokens, else an identity."""

    issuer: str
    user_id: int | None = None
    subject: str = ""
    email: str = ""
    email_verified: bool = False
    name: str = ""
    device_id: str = ""
    admin: bool = False
    config: IssuerConfig | None = None


def _header(token: str) -> dict[str, Any]:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        raise InvalidGrant("the token is not a JWT") from None
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in ("RS256", "ES256", "EdDSA"):
        raise InvalidGrant("the token's algorithm is not accepted")
    if any(name in header for name in _FORBIDDEN_HEADERS):
        raise InvalidGrant("the token names its own key")
    return header


def _own_subject(token: str, *, kid: Any) -> Subject:
    if get_keyring().get(kid) is None:
        raise InvalidGrant("unknown key")
    try:
        claims = decode_access_token(token)
        admin = False
    except TokenExpired:
        raise InvalidGrant("the token has expired") from None
    except TokenInvalid:
        claims = _own_admin_claims(token)
        admin = True
    user_id = int(claims["sub"])
    if not user_token_valid(user_id=user_id, issued_at=float(claims.get("iat") or 0)):
        raise InvalidGrant("the token was revoked or its user is inactive")
    device = claims.get("device_id") or ""
    return Subject(issuer=settings.RTC_JWT_ISSUER, user_id=user_id,
                   device_id=device if isinstance(device, str) else "", admin=admin)


def _own_admin_claims(token: str) -> dict[str, Any]:
    header = jwt.get_unverified_header(token)
    key = get_keyring().get(header.get("kid"))
    if key is None or header.get("alg") != key.algorithm:
        raise InvalidGrant("unknown key")
    try:
        claims = jwt.decode(
            token, key.public_key, algorithms=[key.algorithm], audience=admin_audience(),
            issuer=settings.RTC_JWT_ISSUER, leeway=api_settings.LEEWAY,
            options={"require": ["exp", "iat", "sub", "aud", "iss"]},
        )
    except jwt.ExpiredSignatureError:
        raise InvalidGrant("the token has expired") from None
    except jwt.InvalidTokenError:
        raise InvalidGrant("the token is not valid") from None
    sub = claims.get("sub")
    if claims.get("token_type") != ADMIN_TOKEN_TYPE or not valid_subject(sub):
        raise InvalidGrant("the token is not valid")
    return claims


def _claim(claims: dict[str, Any], config: IssuerConfig, name: str) -> str:
    value = claims.get(config.claims.get(name) or "")
    return value if isinstance(value, str) else ""


def _external_subject(token: str, *, header: dict[str, Any], issuer: str) -> Subject:
    config = issuer_config(issuer)
    if config is None:
        raise InvalidGrant("the token's issuer is not trusted")
    if header["alg"] not in config.algorithms:
        raise InvalidGrant("the token's algorithm is not accepted for this issuer")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise InvalidGrant("the token has no kid")
    found = issuer_key(config, kid)  # may raise TemporarilyUnavailable
    if found is None:
        raise InvalidGrant("unknown key")
    key, algorithm = found
    if header["alg"] != algorithm:
        raise InvalidGrant("the token's algorithm does not match its key")
    if not config.audiences:
        raise InvalidGrant("the issuer has no audience configured")
    try:
        claims = jwt.decode(
            token, key, algorithms=[algorithm], audience=list(config.audiences), issuer=issuer,
            leeway=api_settings.LEEWAY, options={"require": ["exp", "iss", "aud"]},
        )
    except jwt.ExpiredSignatureError:
        raise InvalidGrant("the token has expired") from None
    except jwt.ImmatureSignatureError:
        raise InvalidGrant("the token is not valid yet") from None
    except jwt.InvalidTokenError:
        raise InvalidGrant("the token is not valid") from None
    subject = _claim(claims, config, "subject")
    if not subject or len(subject) > 255:
        raise InvalidGrant("the token has no usable subject")
    device = _claim(claims, config, "device")
    return Subject(
        issuer=issuer, subject=subject, email=_claim(claims, config, "email")[:254].lower(),
        email_verified=claims.get("email_verified") is True,
        name=_claim(claims, config, "name")[:150],
        device_id=device if _DEVICE.match(device or "-") and device else "", config=config,
    )


def subject_verify(token: str, *, token_type: str) -> Subject:
    """Verify a subject (or actor) token; ``InvalidGrant`` for anything wrong with it."""
    if token_type not in SUBJECT_TYPES:
        raise InvalidRequest("unsupported subject_token_type")
    header = _header(token)
    try:
        issuer = jwt.decode(token, options={"verify_signature": False}).get("iss")
    except jwt.InvalidTokenError:
        raise InvalidGrant("the token is not a JWT") from None
    if not isinstance(issuer, str) or not issuer:
        raise InvalidGrant("the token has no issuer")
    if issuer == settings.RTC_JWT_ISSUER:
        return _own_subject(token, kid=header.get("kid"))
    return _external_subject(token, header=header, issuer=issuer)


def _synthetic_email(subject: Subject) -> str:
    digest = hashlib.sha256(f"{subject.issuer}\n{subject.subject}".encode()).hexdigest()[:24]
    return f"ext-{digest}@external.invalid"


def _user_for(subject: Subject) -> Any:
    """Find or create the user of an external identity (inside the caller's transaction)."""
    user_model = get_user_model()
    identity = ExternalIdentity.objects.select_related("user").filter(
        issuer=subject.issuer, subject=subject.subject
    ).first()
    if identity is not None:
        return identity.user
    user = None
    if subject.email and subject.config is not None and subject.config.merge_by_email:
        user = user_model.objects.filter(email=subject.email).first()
    if user is None:
        email = subject.email
        if not email or user_model.objects.filter(email=email).exists():
            email = _synthetic_email(subject)
        user = user_model.objects.create_user(email, None, first_name=subject.name)
    ExternalIdentity.objects.create(user=user, issuer=subject.issuer, subject=subject.subject,
                                    email=subject.email)
    return user


def _resolve_user(subject: Subject) -> Any:
    if subject.user_id is not None:
        return get_user_model().objects.get(pk=subject.user_id)
    for attempt in range(2):
        try:
            with transaction.atomic():
                return _user_for(subject)
        except IntegrityError:
            if attempt:  # a concurrent exchange created it; the second pass finds it
                raise
    raise AssertionError("unreachable")


def _lifetime(subject: Subject) -> timedelta:
    minutes = min(
        int(getattr(settings, "RTC_EXCHANGE_MAX_MINUTES", 15)),
        subject.config.max_token_minutes if subject.config else 10**6,
    )
    return min(timedelta(minutes=max(minutes, 1)), api_settings.ACCESS_TOKEN_LIFETIME)


@grant(GRANT_TYPE, client_grant=OAuthClient.Grant.TOKEN_EXCHANGE)
def token_exchange(request: TokenRequest) -> dict[str, Any]:
    """The ``token-exchange`` grant: ``{access_token, issued_token_type, token_type,
    expires_in}`` for the user the subject token names."""
    token, token_type = request.get("subject_token"), request.get("subject_token_type")
    if not token or not token_type:
        raise InvalidRequest("subject_token and subject_token_type are required")
    requested = request.get("requested_token_type") or TT_ACCESS
    if requested not in (TT_ACCESS, TT_JWT):
        raise InvalidRequest("requested_token_type: only access tokens are issued")
    for target in (request.get("audience"), request.get("resource")):
        if target and target != settings.RTC_JWT_AUDIENCE:
            raise InvalidTarget("this server only issues tokens for its own audience")
    subject = subject_verify(token, token_type=token_type)
    if request.client.own_issuer_only and subject.user_id is None:
        raise UnauthorizedClient("this client may only exchange tokens of this server")
    act = None
    if request.get("actor_token"):
        actor = subject_verify(request.get("actor_token"),
                               token_type=request.get("actor_token_type") or TT_JWT)
        if not actor.admin or actor.user_id is None:
            raise InvalidGrant("the actor must be an admin token of this server")
        if not get_user_model().objects.filter(pk=actor.user_id, is_staff=True,
                                               is_active=True).exists():
            raise InvalidGrant("the actor is not active staff")
        act = {"sub": str(actor.user_id), "iss": settings.RTC_JWT_ISSUER}
    elif request.get("actor_token_type"):
        raise InvalidRequest("actor_token_type without actor_token")
    if subject.admin:
        staff = get_user_model().objects.filter(pk=subject.user_id, is_staff=True).exists()
        if not staff:
            raise InvalidGrant("admin tokens are for staff only")
    lifetime = _lifetime(subject)
    refresh = None
    with transaction.atomic():
        user = _resolve_user(subject)
        if not user.is_active:
            raise InvalidGrant("the user is inactive")
        if subject.device_id:
            Device.objects.update_or_create(user=user, device_id=subject.device_id)
        if not request.client.public and act is None and not subject.admin:
            refresh = token_family_start(user=user, device_id=subject.device_id)["refresh"]
    extra: dict[str, Any] = {"act": act} if act is not None else {}
    if refresh is not None:  # the exchanged token belongs to the new login (family)
        extra[FAMILY_CLAIM] = jwt.decode(refresh, options={"verify_signature": False})[FAMILY_CLAIM]
    access = issue_access_token(user, lifetime=lifetime, device_id=subject.device_id,
                                claims=extra)
    result = {
        "access_token": access,
        "issued_token_type": TT_ACCESS,
        "token_type": "Bearer",
        "expires_in": int(lifetime.total_seconds()),
    }
    if refresh is not None:
        result["refresh_token"] = refresh
    return result

