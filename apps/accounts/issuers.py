"""Trusted issuers and their JWKS: the one module that fetches keys from other servers.

Invariants:

- An issuer is trusted when an enabled ``TrustedIssuer`` row or an entry of
  ``settings.RTC_TRUSTED_ISSUERS`` names its exact ``iss`` (the row wins).
- Keys come only from the configured ``jwks_uri`` (https; http only for a loopback host), never
  from a token's ``jku``/``x5u``/``jwk``/``x5c`` header. The fetch has a timeout, follows no
  redirect and reads at most 256 KiB.
- The JWKS is cached in the shared cache (Redis) for its ``Cache-Control: max-age``, bounded to
  60 s .. 1 h (300 s without one). A ``kid`` not in it triggers one refetch, and fetches of an
  issuer are spaced by at least a minute across all processes (``cache.add`` gate), so a flood of
  tokens with random ``kid`` values costs the issuer one request a minute.
- Each JWK is bound to the one algorithm its key type implies (RSA >= 2048 bits -> RS256, P-256 ->
  ES256, Ed25519 -> EdDSA), and only if the issuer allows it; symmetric keys are ignored.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.cache import cache
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from .keys import ALGORITHMS, PublicKey, algorithm_for_key
from .oauth import TemporarilyUnavailable

FETCH_TIMEOUT = 3.0
MAX_JWKS_BYTES = 256 * 1024
REFETCH_INTERVAL = 60  # seconds between two fetches of one issuer's JWKS
DEFAULT_TTL, MIN_TTL, MAX_TTL = 300, 60, 3600
DEFAULT_CLAIMS = {"subject": "sub", "email": "email", "name": "name", "device": "device_id"}
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*(\d+)", re.I)


@dataclass(frozen=True)
class IssuerConfig:
    issuer: str
    jwks_uri: str
    audiences: tuple[str, ...]
    algorithms: tuple[str, ...] = ALGORITHMS
    claims: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_CLAIMS))
    merge_by_email: bool = False
    max_token_minutes: int = 15

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> IssuerConfig:
        algorithms = tuple(a for a in (data.get("algorithms") or ALGORITHMS) if a in ALGORITHMS)
        audiences = data.get("audiences") or []
        if isinstance(audiences, str):
            audiences = [audiences]
        return cls(
            issuer=str(data["issuer"]),
            jwks_uri=str(data["jwks_uri"]),
            audiences=tuple(str(a) for a in audiences),
            algorithms=algorithms,
            claims={**DEFAULT_CLAIMS, **(data.get("claims") or {})},
            merge_by_email=bool(data.get("merge_by_email", False)),
            max_token_minutes=int(data.get("max_token_minutes") or 15),
        )


def issuer_config(issuer: str) -> IssuerConfig | None:
    """The trusted issuer named exactly ``issuer``, or ``None``."""
    from .models import TrustedIssuer

    row = TrustedIssuer.objects.filter(issuer=issuer, enabled=True).first()
    if row is not None:
        return IssuerConfig.from_mapping({
            "issuer": row.issuer, "jwks_uri": row.jwks_uri, "audiences": row.audiences,
            "algorithms": row.algorithms, "claims": row.claims,
            "merge_by_email": row.merge_by_email, "max_token_minutes": row.max_token_minutes,
        })
    for entry in getattr(settings, "RTC_TRUSTED_ISSUERS", None) or []:
        if isinstance(entry, dict) and entry.get("issuer") == issuer:
            return IssuerConfig.from_mapping(entry)
    return None


# --- JWKS -----------------------------------------------------------------------------------


def _cache_keys(config: IssuerConfig) -> tuple[str, str]:
    digest = hashlib.sha256(f"{config.issuer}\n{config.jwks_uri}".encode()).hexdigest()[:32]
    return f"jwks:{digest}", f"jwks-fetch:{digest}"


def _uri_allowed(uri: str) -> bool:
    parts = urlsplit(uri)
    if parts.scheme == "https":
        return bool(parts.hostname)
    if parts.scheme != "http" or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def _ttl(cache_control: str) -> int:
    match = _MAX_AGE.search(cache_control or "")
    ttl = int(match.group(1)) if match else DEFAULT_TTL
    return max(MIN_TTL, min(MAX_TTL, ttl))


def _fetch(config: IssuerConfig) -> tuple[dict[str, Any], int]:
    if not _uri_allowed(config.jwks_uri):
        raise TemporarilyUnavailable("the issuer's jwks_uri is not https")
    # The scheme was checked just above (https, or http to a loopback host).
    request = urllib.request.Request(  # noqa: S310
        config.jwks_uri, headers={"Accept": "application/json"}
    )
    try:
        with _opener.open(request, timeout=FETCH_TIMEOUT) as response:
            if response.status != 200:
                raise TemporarilyUnavailable("the issuer's JWKS could not be fetched")
            body = response.read(MAX_JWKS_BYTES + 1)
            ttl = _ttl(response.headers.get("Cache-Control", ""))
    except (OSError, urllib.error.URLError, ValueError):
        raise TemporarilyUnavailable("the issuer's JWKS could not be fetched") from None
    if len(body) > MAX_JWKS_BYTES:
        raise TemporarilyUnavailable("the issuer's JWKS is too large")
    try:
        document = json.loads(body)
    except ValueError:
        raise TemporarilyUnavailable("the issuer's JWKS is not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise TemporarilyUnavailable("the issuer's JWKS has no keys")
    return document, ttl


def _jwks(config: IssuerConfig, *, refresh: bool) -> dict[str, Any] | None:
    """The cached JWKS document, fetched when missing (or ``refresh``) and the gate is open.
    ``None`` when a refresh was asked for but the gate is closed."""
    doc_key, gate_key = _cache_keys(config)
    document = None if refresh else cache.get(doc_key)
    if document is not None:
        return document
    if not cache.add(gate_key, 1, timeout=REFETCH_INTERVAL):
        if refresh:
            return None
        document = cache.get(doc_key)  # another process may have fetched it meanwhile
        if document is None:
            raise TemporarilyUnavailable("the issuer's JWKS is not available; retry later")
        return document
    document, ttl = _fetch(config)
    cache.set(doc_key, document, timeout=ttl)
    return document


def _jwk_key(jwk: Any, config: IssuerConfig) -> tuple[PublicKey, str] | None:
    if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
        return None
    loader = {"RSA": RSAAlgorithm, "EC": ECAlgorithm, "OKP": OKPAlgorithm}.get(jwk.get("kty"))
    if loader is None:  # "oct" and anything else: never a symmetric key
        return None
    try:
        key = loader.from_jwk(json.dumps({k: v for k, v in jwk.items() if k != "d"}))
        algorithm = algorithm_for_key(key)
    except Exception:  # a malformed JWK is skipped, whatever the parser raises
        return None
    if algorithm not in config.algorithms or jwk.get("alg", algorithm) != algorithm:
        return None
    return key, algorithm


def issuer_key(config: IssuerConfig, kid: str) -> tuple[PublicKey, str] | None:
    """The public key and its algorithm for ``kid``: from the cached JWKS, else after one refetch
    (at most one a minute per issuer). ``None`` when the issuer has no such usable key;
    ``TemporarilyUnavailable`` when its JWKS cannot be fetched."""
    for attempt in (False, True):
        document = _jwks(config, refresh=attempt)
        if document is None:
            return None
        for jwk in document.get("keys", []):
            if isinstance(jwk, dict) and jwk.get("kid") == kid:
                found = _jwk_key(jwk, config)
                if found is not None:
                    return found
    return None


def jwks_cache_clear(config: IssuerConfig) -> None:
    """Forget an issuer's cached JWKS and its fetch gate (after editing it in the admin)."""
    cache.delete_many(list(_cache_keys(config)))
