"""Upstream login providers of ``/oauth2/authorize``: any OAuth2/OIDC provider by its endpoints.

Flow: ``/oauth2/upstream/<name>?next=<an /oauth2/authorize request>`` keeps a fresh ``state``,
``nonce`` and PKCE verifier (S256) in the Django session and redirects to the provider; its
``/oauth2/callback/<name>`` pops that state (single use, bound to this browser's session),
exchanges the code at the token endpoint (client secret, ``client_secret_post``), verifies the
``id_token`` with the trusted-issuers machinery (``apps.accounts.issuers``: the configured JWKS
only, cached and rate-limited; RS256/ES256/EdDSA only), then finds or creates the user by
``(issuer, sub)`` (``exchange._resolve_user``, the same ``ExternalIdentity`` rule as the token
exchange) and continues the original authorize request.

A plain OAuth2 provider (no ``issuer``/``jwks_uri``, e.g. GitHub) has a ``userinfo_endpoint``
instead: the upstream access token from the same code exchange is sent to it as a bearer token
and its JSON answer gives the claims; the identity's issuer is ``oauth2-provider:<name>``.

Why hand-written protocol code: the client side of an authorization-code exchange is one form
POST; the security-relevant part (the id_token) is verified by PyJWT through the same key
machinery as the token exchange, so a client library would add a second JWKS cache and fetcher.

Invariants: ``next`` must be a path of ``/oauth2/authorize`` on this server (no open redirect);
a refusal (bad state, upstream error, token endpoint down, id_token wrong in any way, userinfo
down or without a subject) renders an
error page and writes nothing: the user and identity are created only after every check.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

import jwt
from django.conf import settings
from rest_framework_simplejwt.settings import api_settings

from .issuers import FETCH_TIMEOUT, IssuerConfig, _opener, _uri_allowed, issuer_key
from .keys import ALGORITHMS
from .oauth import InvalidGrant, TemporarilyUnavailable

SESSION_KEY = "oauth2_upstream"
DONE_KEY = "oauth2_upstream_done"
STATE_SECONDS = 600
MAX_TOKEN_RESPONSE = 64 * 1024
PLAIN_ISSUER_PREFIX = "oauth2-provider:"  # identities of plain OAuth2 providers: prefix + name
AUTHORIZE_PATH = "/oauth2/authorize?"
DEFAULT_CLAIMS = {"subject": "sub", "email": "email", "name": "name"}


class UpstreamError(Exception):
    """A refused upstream login; the message is safe to show."""


@dataclass(frozen=True)
class Provider:
    name: str
    label: str
    authorization_endpoint: str
    token_endpoint: str
    client_id: str
    issuer: str = ""
    jwks_uri: str = ""
    userinfo_endpoint: str = ""
    client_secret: str = ""
    scopes: str = "openid email profile"
    algorithms: tuple[str, ...] = ALGORITHMS
    claims: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_CLAIMS))
    merge_by_email: bool = False

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> Provider:
        scopes = data.get("scopes") or "openid email profile"
        if isinstance(scopes, list | tuple):
            scopes = " ".join(str(s) for s in scopes)
        issuer, jwks_uri = str(data.get("issuer") or ""), str(data.get("jwks_uri") or "")
        userinfo = str(data.get("userinfo_endpoint") or "")
        if not (issuer and jwks_uri) and not userinfo:
            raise KeyError("issuer and jwks_uri, or userinfo_endpoint")
        return cls(
            name=str(data["name"]), label=str(data.get("label") or data["name"]),
            authorization_endpoint=str(data["authorization_endpoint"]),
            token_endpoint=str(data["token_endpoint"]), client_id=str(data["client_id"]),
            client_secret=str(data.get("client_secret") or ""), scopes=str(scopes),
            issuer=issuer, jwks_uri=jwks_uri, userinfo_endpoint=userinfo,
            algorithms=tuple(a for a in (data.get("algorithms") or ALGORITHMS)
                             if a in ALGORITHMS),
            claims={**DEFAULT_CLAIMS, **(data.get("claims") or {})},
            merge_by_email=bool(data.get("merge_by_email", False)),
        )

    @property
    def oidc(self) -> bool:
        """An id_token provider; otherwise plain OAuth2 with a userinfo endpoint."""
        return bool(self.issuer and self.jwks_uri)

    @property
    def identity_issuer(self) -> str:
        """The ``ExternalIdentity.issuer`` of its users: the ``iss``, or the namespaced name."""
        return self.issuer if self.oidc else PLAIN_ISSUER_PREFIX + self.name

    def issuer_config(self) -> IssuerConfig:
        """The provider as a trusted issuer whose only audience is our client id with it."""
        return IssuerConfig(issuer=self.identity_issuer, jwks_uri=self.jwks_uri,
                            audiences=(self.client_id,), algorithms=self.algorithms,
                            claims={**self.claims, "device": ""},
                            merge_by_email=self.merge_by_email)


_FIELDS = ("name", "label", "authorization_endpoint", "token_endpoint", "client_id",
           "client_secret", "scopes", "issuer", "jwks_uri", "userinfo_endpoint", "algorithms",
           "claims", "merge_by_email")


def _env_entries() -> list[Any]:
    entries = getattr(settings, "RTC_OAUTH_PROVIDERS", None) or []  # RTC_OAUTH_PROVIDERS (JSON)
    return entries if isinstance(entries, list) else []


def providers() -> list[Provider]:
    """Enabled providers: admin rows first, then ``RTC_OAUTH_PROVIDERS`` entries of other names."""
    from .models import OAuthProvider

    found = [Provider.from_mapping({f: getattr(row, f) for f in _FIELDS})
             for row in OAuthProvider.objects.filter(enabled=True)]
    names = {p.name for p in found} | {"local"}
    for entry in _env_entries():
        try:
            provider = Provider.from_mapping(entry)
        except (KeyError, TypeError, AttributeError):
            continue
        if provider.name not in names:
            names.add(provider.name)
            found.append(provider)
    return found


def provider(name: str) -> Provider | None:
    return next((p for p in providers() if p.name == name), None)


def next_allowed(path: str) -> bool:
    """Only a request of our own authorize endpoint may be continued (no open redirect)."""
    return (path.startswith(AUTHORIZE_PATH) and "\\" not in path
            and not any(c in path for c in "\r\n"))


# --- start -----------------------------------------------------------------------------------


def start(session: Any, provider: Provider, *, next_path: str, callback_uri: str) -> str:
    """Remember a new state/nonce/verifier in the session; the provider's authorization URL."""
    state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    pending = {k: v for k, v in (session.get(SESSION_KEY) or {}).items()
               if v.get("at", 0) > time.time() - STATE_SECONDS}
    while len(pending) >= 5:  # a few tabs at once; the oldest goes
        pending.pop(min(pending, key=lambda k: pending[k]["at"]))
    pending[state] = {"provider": provider.name, "nonce": nonce, "verifier": verifier,
                      "next": next_path, "at": time.time()}
    session[SESSION_KEY] = pending
    query = urlencode({
        "response_type": "code", "client_id": provider.client_id, "redirect_uri": callback_uri,
        "scope": provider.scopes, "state": state, "nonce": nonce,
        "code_challenge": challenge.rstrip(b"=").decode(), "code_challenge_method": "S256",
    })
    endpoint = provider.authorization_endpoint
    return endpoint + ("&" if "?" in endpoint else "?") + query


def pop_state(session: Any, provider: Provider, state: str) -> dict[str, Any]:
    pending = dict(session.get(SESSION_KEY) or {})
    entry = pending.pop(state, None) if state else None
    session[SESSION_KEY] = pending
    if (entry is None or entry.get("provider") != provider.name
            or entry.get("at", 0) < time.time() - STATE_SECONDS):
        raise UpstreamError("The sign-in state is unknown or expired; start again.")
    return entry


# --- callback --------------------------------------------------------------------------------


def _fetch_json(request: urllib.request.Request, *, refused: str, unreachable: str) -> Any:
    """The JSON of one upstream answer (3 s, no redirects, at most 64 KiB; None if not JSON)."""
    try:
        with _opener.open(request, timeout=FETCH_TIMEOUT) as response:
            body = response.read(MAX_TOKEN_RESPONSE + 1)
    except urllib.error.HTTPError:
        raise UpstreamError(refused) from None
    except (OSError, ValueError):
        raise UpstreamError(unreachable) from None
    try:
        return json.loads(body) if len(body) <= MAX_TOKEN_RESPONSE else None
    except ValueError:
        return None


def _token_request(provider: Provider, *, code: str, verifier: str, callback_uri: str) -> str:
    """The upstream token endpoint's ``id_token`` (OIDC) or ``access_token`` for ``code``."""
    if not _uri_allowed(provider.token_endpoint):
        raise UpstreamError("The provider's token endpoint is not https.")
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": callback_uri,
            "client_id": provider.client_id, "code_verifier": verifier}
    if provider.client_secret:
        form["client_secret"] = provider.client_secret
    request = urllib.request.Request(  # noqa: S310 - scheme checked by _uri_allowed
        provider.token_endpoint, data=urlencode(form).encode(),
        headers={"Accept": "application/json",
                 "Content-Type": "application/x-www-form-urlencoded"},
    )
    document = _fetch_json(request, refused="The provider refused the sign-in code.",
                           unreachable="The provider could not be reached; try again later.")
    wanted = "id_token" if provider.oidc else "access_token"
    token = document.get(wanted) if isinstance(document, dict) else None
    if not isinstance(token, str) or not token:
        raise UpstreamError(f"The provider sent no {wanted}.")
    return token


def _userinfo(provider: Provider, access_token: str) -> dict[str, Any]:
    """The plain OAuth2 provider's userinfo JSON object for its ``access_token``."""
    if not _uri_allowed(provider.userinfo_endpoint):
        raise UpstreamError("The provider's userinfo endpoint is not https.")
    request = urllib.request.Request(  # noqa: S310 - scheme checked by _uri_allowed
        provider.userinfo_endpoint,
        headers={"Accept": "application/json", "Authorization": f"Bearer {access_token}"},
    )
    document = _fetch_json(
        request, refused="The provider's userinfo endpoint refused the sign-in.",
        unreachable="The provider's userinfo could not be fetched; try again later.",
    )
    if not isinstance(document, dict):
        raise UpstreamError("The provider's userinfo is not a JSON object.")
    return document


def _verified_claims(provider: Provider, id_token: str, *, nonce: str) -> dict[str, Any]:
    from .exchange import _header

    try:
        header = _header(id_token)  # RS256/ES256/EdDSA only, no jku/x5u/jwk/x5c/crit
    except InvalidGrant:
        raise UpstreamError("The provider's id_token is not acceptable.") from None
    config = provider.issuer_config()
    kid = header.get("kid")
    try:
        found = issuer_key(config, kid) if isinstance(kid, str) and kid else None
    except TemporarilyUnavailable:
        raise UpstreamError("The provider's keys could not be fetched; try again later.") from None
    if found is None or found[1] != header["alg"]:
        raise UpstreamError("The provider's id_token is signed by an unknown key.")
    try:
        claims = jwt.decode(
            id_token, found[0], algorithms=[found[1]], audience=provider.client_id,
            issuer=provider.issuer, leeway=api_settings.LEEWAY,
            options={"require": ["exp", "iat", "iss", "aud", "sub"]},
        )
    except jwt.InvalidTokenError:
        raise UpstreamError("The provider's id_token is not valid.") from None
    aud = claims.get("aud")
    if isinstance(aud, list) and len(aud) > 1 and claims.get("azp") != provider.client_id:
        raise UpstreamError("The provider's id_token is for another client.")
    if not isinstance(claims.get("nonce"), str) or not secrets.compare_digest(
            claims["nonce"], nonce):
        raise UpstreamError("The provider's id_token does not match this sign-in.")
    return claims


def complete(provider: Provider, entry: dict[str, Any], *, code: str, callback_uri: str) -> Any:
    """Exchange the code, verify the id_token (or fetch the userinfo), find or create the user
    (written last)."""
    from .exchange import Subject, _resolve_user

    token = _token_request(provider, code=code, verifier=entry["verifier"],
                           callback_uri=callback_uri)
    if provider.oidc:
        claims = _verified_claims(provider, token, nonce=entry["nonce"])
    else:
        claims = _userinfo(provider, token)

    def claim(name: str) -> str:
        value = claims.get(provider.claims.get(name) or "")
        return value if isinstance(value, str) else ""

    subject = claim("subject")
    if not provider.oidc and not subject:
        # GitHub-like APIs: a numeric subject, and ``id`` when the mapping keeps ``sub``.
        names = [provider.claims.get("subject") or "sub"]
        names += ["id"] if names[0] == "sub" else []
        value = next((claims[n] for n in names if n in claims), None)
        if isinstance(value, int) and not isinstance(value, bool):
            subject = str(value)
        elif isinstance(value, str):
            subject = value
    if not subject or len(subject) > 255:
        source = "id_token" if provider.oidc else "userinfo"
        raise UpstreamError(f"The provider's {source} names no usable subject.")
    verified = claims.get("email_verified") is True
    # An unverified email never links to an existing account, whatever merge_by_email says.
    config = replace(provider.issuer_config(), merge_by_email=provider.merge_by_email and verified)
    user = _resolve_user(Subject(
        issuer=provider.identity_issuer, subject=subject, email=claim("email")[:254].lower(),
        email_verified=verified, name=claim("name")[:150], config=config,
    ))
    if not user.is_active:
        raise UpstreamError("This account is disabled.")
    return user
