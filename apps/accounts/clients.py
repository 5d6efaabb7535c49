"""OAuth2 clients of the token endpoint: creation (admin, ``manage.py oauth_client``) and
authentication by HTTP Basic or form fields (RFC 6749 §2.3.1).

Secrets are 256-bit random strings shown once; only their SHA-256 is stored and compared in
constant time. A confidential client may instead authenticate with ``private_key_jwt``
(RFC 7523 §2.2, OpenID Connect Core §9): a JWT signed by a key of its registered JWKS (``jwks_uri``
fetched like an issuer's, or inline ``jwks``), ``iss`` = ``sub`` = its client_id, ``aud`` the token
endpoint URL (or our issuer), ``exp`` at most 5 minutes ahead and a single-use ``jti``.

The admin's floating widget uses the built-in public client ``rtcagent-admin``, which may only
exchange tokens signed by our own keys (the short admin token of the session).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_plus

import jwt
from django.conf import settings
from django.core.cache import cache
from rest_framework_simplejwt.settings import api_settings

from .issuers import IssuerConfig, _jwk_key, issuer_key
from .models import OAuthClient
from .oauth import Client, InvalidClient, InvalidRequest

ADMIN_WIDGET_CLIENT_ID = "rtcagent-admin"
ADMIN_WIDGET_CLIENT = Client(
    client_id=ADMIN_WIDGET_CLIENT_ID,
    public=True,
    grants=frozenset({OAuthClient.Grant.TOKEN_EXCHANGE}),
    own_issuer_only=True,
)


ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
MAX_ASSERTION_SECONDS = 300  # an assertion's exp may be at most this far ahead


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def oauth_client_create(
    *, name: str, public: bool = False, redirect_uris: list[str] | None = None,
    grants: list[str] | None = None, jwks_uri: str | None = None,
    jwks: dict[str, Any] | None = None,
) -> tuple[OAuthClient, str]:
    """A new client and its secret (``""`` for a public client or one registered with a JWKS,
    which authenticates by ``private_key_jwt``); the secret is not stored."""
    grants = grants or [OAuthClient.Grant.TOKEN_EXCHANGE]
    for value in grants:
        if value not in OAuthClient.Grant.values:
            raise ValueError(f"unknown grant {value!r}")
    key_jwt = bool(jwks_uri or jwks)
    if key_jwt and public:
        raise ValueError("a public client has no keys")
    if jwks is not None and not isinstance(jwks.get("keys"), list):
        raise ValueError("jwks must be {\"keys\": [...]}")
    secret = "" if public or key_jwt else secrets.token_urlsafe(32)
    client = OAuthClient.objects.create(
        client_id="rtc_" + secrets.token_urlsafe(12),
        name=name,
        public=public,
        secret_hash=secret_hash(secret) if secret else "",
        redirect_uris=list(redirect_uris or []),
        grants=list(grants),
        auth_method=(OAuthClient.AuthMethod.PRIVATE_KEY_JWT if key_jwt
                     else OAuthClient.AuthMethod.CLIENT_SECRET),
        jwks_uri=jwks_uri or "",
        jwks=jwks,
    )
    return client, secret


def oauth_client_new_secret(*, client: OAuthClient) -> str:
    """Replace a confidential client's secret; the old one stops working at once."""
    secret = secrets.token_urlsafe(32)
    OAuthClient.objects.filter(pk=client.pk).update(secret_hash=secret_hash(secret))
    return secret


def _basic_credentials(header: str) -> tuple[str, str] | None:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise InvalidClient("malformed Basic credentials") from None
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        raise InvalidClient("malformed Basic credentials")
    # RFC 6749 §2.3.1: both parts are form-urlencoded before base64.
    return unquote_plus(client_id), unquote_plus(secret)


def _assertion_key(row: OAuthClient, header: dict[str, Any]) -> tuple[Any, str] | None:
    config = IssuerConfig(issuer=f"client:{row.client_id}", jwks_uri=row.jwks_uri or "",
                          audiences=())
    kid = header.get("kid")
    if row.jwks:
        keys = [k for k in row.jwks.get("keys", []) if isinstance(k, dict)]
        if isinstance(kid, str) and kid:
            keys = [k for k in keys if k.get("kid") == kid]
        for jwk in keys:
            found = _jwk_key(jwk, config)
            if found is not None and found[1] == header["alg"]:
                return found
        return None
    if not row.jwks_uri or not isinstance(kid, str) or not kid:
        return None
    return issuer_key(config, kid)  # may raise TemporarilyUnavailable


def _assertion_verify(row: OAuthClient, assertion: str, *, token_url: str) -> None:
    """Check a ``private_key_jwt`` client assertion of ``row``; ``InvalidClient`` if wrong."""
    from .exchange import _header  # RS256/ES256/EdDSA only, no jku/x5u/jwk/x5c/crit
    from .oauth import InvalidGrant

    try:
        header = _header(assertion)
    except InvalidGrant:
        raise InvalidClient("the client assertion is not acceptable") from None
    found = _assertion_key(row, header)
    if found is None or found[1] != header["alg"]:
        raise InvalidClient("the client assertion is signed by an unknown key")
    audiences = [a for a in (token_url, settings.RTC_JWT_ISSUER) if a]
    try:
        claims = jwt.decode(
            assertion, found[0], algorithms=[found[1]], audience=audiences,
            issuer=row.client_id, leeway=api_settings.LEEWAY,
            options={"require": ["exp", "iss", "sub", "aud", "jti"]},
        )
    except jwt.InvalidTokenError:
        raise InvalidClient("the client assertion is not valid") from None
    if claims.get("sub") != row.client_id:
        raise InvalidClient("the client assertion's sub is not the client")
    exp, jti = claims.get("exp"), claims.get("jti")
    now = time.time()
    if not isinstance(exp, int | float) or exp > now + MAX_ASSERTION_SECONDS + 5:
        raise InvalidClient("the client assertion expires too far ahead")
    if not isinstance(jti, str) or not jti or len(jti) > 256:
        raise InvalidClient("the client assertion has no usable jti")
    digest = hashlib.sha256(f"{row.client_id}\n{jti}".encode()).hexdigest()
    # Kept until the assertion could no longer be accepted; cache.add is Redis SET NX EX.
    ttl = max(1, int(exp - now + api_settings.LEEWAY.total_seconds()) + 1)
    if not cache.add(f"client-jti:{digest}", 1, timeout=ttl):
        raise InvalidClient("the client assertion was already used")


def _row_client(row: OAuthClient) -> Client:
    return Client(client_id=row.client_id, public=row.public, grants=frozenset(row.grants),
                  own_issuer_only=row.public)


def _assertion_authenticate(form: Mapping[str, str], *, token_url: str) -> Client:
    if form.get("client_assertion_type") != ASSERTION_TYPE:
        raise InvalidClient("unsupported client_assertion_type")
    assertion = form.get("client_assertion", "")
    if not assertion:
        raise InvalidRequest("client_assertion is required")
    try:
        unverified = jwt.decode(assertion, options={"verify_signature": False})
    except jwt.InvalidTokenError:
        raise InvalidClient("the client assertion is not a JWT") from None
    client_id = unverified.get("iss")
    if not isinstance(client_id, str) or not client_id:
        raise InvalidClient("the client assertion has no iss")
    if form.get("client_id", client_id) != client_id:
        raise InvalidClient("client_id does not match the client assertion")
    row = OAuthClient.objects.filter(client_id=client_id, is_active=True).first()
    if row is None or row.public or row.auth_method != OAuthClient.AuthMethod.PRIVATE_KEY_JWT:
        raise InvalidClient("unknown client or not a private_key_jwt client")
    _assertion_verify(row, assertion, token_url=token_url)
    return _row_client(row)


def client_authenticate(
    *, authorization: str, form: Mapping[str, str], token_url: str = ""
) -> tuple[Client, bool]:
    """The client of a token request and whether it used HTTP Basic (for ``WWW-Authenticate``).

    ``InvalidClient`` for an unknown, inactive or wrongly authenticated client, a confidential
    client without its secret (or assertion), a public client sending one, or a
    ``private_key_jwt`` client sending a secret; ``InvalidRequest`` for two authentication
    methods at once. ``token_url`` is the token endpoint's URL, an accepted assertion ``aud``.
    """
    basic = _basic_credentials(authorization) if authorization else None
    if form.get("client_assertion") or form.get("client_assertion_type"):
        if basic or form.get("client_secret"):
            raise InvalidRequest("use one client authentication method")
        return _assertion_authenticate(form, token_url=token_url), False
    if basic and (form.get("client_secret") or form.get("client_id", basic[0]) != basic[0]):
        raise InvalidRequest("use one client authentication method")
    client_id, secret = basic or (form.get("client_id", ""), form.get("client_secret", ""))
    if not client_id:
        raise InvalidClient("client authentication is required")
    if client_id == ADMIN_WIDGET_CLIENT_ID:
        if secret:
            raise InvalidClient("public clients have no secret")
        return ADMIN_WIDGET_CLIENT, bool(basic)
    row = OAuthClient.objects.filter(client_id=client_id, is_active=True).first()
    if row is None:
        raise InvalidClient("unknown client")
    if row.public:
        if secret:
            raise InvalidClient("public clients have no secret")
    elif row.auth_method == OAuthClient.AuthMethod.PRIVATE_KEY_JWT:
        raise InvalidClient("this client authenticates with private_key_jwt")
    elif not secret or not hmac.compare_digest(secret_hash(secret), row.secret_hash):
        raise InvalidClient("wrong client credentials")
    return _row_client(row), bool(basic)
