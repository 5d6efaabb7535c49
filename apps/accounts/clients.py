"""OAuth2 clients of the token endpoint: creation (admin, ``manage.py oauth_client``) and
authentication by HTTP Basic or form fields (RFC 6749 §2.3.1).

Secrets are 256-bit random strings shown once; only their SHA-256 is stored and compared in
constant time. The admin's floating widget uses the built-in public client ``rtcagent-admin``,
which may only exchange tokens signed by our own keys (the short admin token of the session).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from urllib.parse import unquote_plus

from .models import OAuthClient
from .oauth import Client, InvalidClient, InvalidRequest

ADMIN_WIDGET_CLIENT_ID = "rtcagent-admin"
ADMIN_WIDGET_CLIENT = Client(
    client_id=ADMIN_WIDGET_CLIENT_ID,
    public=True,
    grants=frozenset({OAuthClient.Grant.TOKEN_EXCHANGE}),
    own_issuer_only=True,
)


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def oauth_client_create(
    *, name: str, public: bool = False, redirect_uris: list[str] | None = None,
    grants: list[str] | None = None,
) -> tuple[OAuthClient, str]:
    """A new client and its secret (``""`` for a public client); the secret is not stored."""
    grants = grants or [OAuthClient.Grant.TOKEN_EXCHANGE]
    for value in grants:
        if value not in OAuthClient.Grant.values:
            raise ValueError(f"unknown grant {value!r}")
    secret = "" if public else secrets.token_urlsafe(32)
    client = OAuthClient.objects.create(
        client_id="rtc_" + secrets.token_urlsafe(12),
        name=name,
        public=public,
        secret_hash=secret_hash(secret) if secret else "",
        redirect_uris=list(redirect_uris or []),
        grants=list(grants),
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


def client_authenticate(*, authorization: str, form: Mapping[str, str]) -> tuple[Client, bool]:
    """The client of a token request and whether it used HTTP Basic (for ``WWW-Authenticate``).

    ``InvalidClient`` for an unknown, inactive or wrongly authenticated client, a confidential
    client without its secret, or a public client sending one; ``InvalidRequest`` for two
    authentication methods at once.
    """
    basic = _basic_credentials(authorization) if authorization else None
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
    elif not secret or not hmac.compare_digest(secret_hash(secret), row.secret_hash):
        raise InvalidClient("wrong client credentials")
    client = Client(client_id=row.client_id, public=row.public, grants=frozenset(row.grants),
                    own_issuer_only=row.public)
    return client, bool(basic)
