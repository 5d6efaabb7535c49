"""The framework-free core of ``/oauth2/token``: error classes with their RFC 6749/8693 codes and
the grant registry (one handler per ``grant_type``).

Protocol code here is hand-written on purpose: django-oauth-toolkit (oauthlib) has no RFC 8693
token-exchange grant and issues opaque database tokens, while ours are JWTs from the keyring; the
JOSE work itself (signatures, ``exp``/``aud`` checks) is PyJWT's and ``cryptography``'s. A grant
is added with ``@grant("<grant_type>")`` in its own module, imported by ``oauth_views``; the view
never changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class OAuthError(Exception):
    """An error answered as ``{"error": code, "error_description": ...}`` (RFC 6749 §5.2)."""

    code = "invalid_request"
    status = 400

    def __init__(self, description: str = "") -> None:
        self.description = description
        super().__init__(description or self.code)


class InvalidRequest(OAuthError):
    code = "invalid_request"


class InvalidClient(OAuthError):
    code = "invalid_client"
    status = 401


class InvalidGrant(OAuthError):
    code = "invalid_grant"


class InvalidTarget(OAuthError):
    code = "invalid_target"


class UnauthorizedClient(OAuthError):
    code = "unauthorized_client"


class UnsupportedGrantType(OAuthError):
    code = "unsupported_grant_type"


class TemporarilyUnavailable(OAuthError):
    code = "temporarily_unavailable"
    status = 503


@dataclass(frozen=True)
class Client:
    """An authenticated (or, for public clients, identified) client of the token endpoint."""

    client_id: str
    public: bool
    grants: frozenset[str]
    own_issuer_only: bool = False  # may exchange only tokens signed by our own keys


@dataclass(frozen=True)
class TokenRequest:
    client: Client
    params: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str) -> str:
        return self.params.get(name, "")


GrantHandler = Callable[[TokenRequest], dict[str, Any]]
_GRANTS: dict[str, tuple[str, GrantHandler]] = {}


def grant(grant_type: str, *, client_grant: str) -> Callable[[GrantHandler], GrantHandler]:
    """Register the handler of ``grant_type``; ``client_grant`` is the ``OAuthClient.grants``
    value a client needs to use it. A second registration of a name fails at import."""

    def register(handler: GrantHandler) -> GrantHandler:
        if grant_type in _GRANTS:
            raise RuntimeError(f"grant_type {grant_type} registered twice")
        _GRANTS[grant_type] = (client_grant, handler)
        return handler

    return register


def grant_dispatch(request: TokenRequest, grant_type: str) -> dict[str, Any]:
    """Run the handler of ``grant_type`` for an authenticated client."""
    entry = _GRANTS.get(grant_type)
    if entry is None:
        raise UnsupportedGrantType(f"grant_type {grant_type!r} is not supported")
    client_grant, handler = entry
    if client_grant not in request.client.grants:
        raise UnauthorizedClient(f"this client may not use {grant_type}")
    return handler(request)
