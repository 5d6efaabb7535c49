"""Hand-made JWTs for the refusal tests: each differs from a valid token in one respect."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings

from apps.accounts.keys import JwtKey, get_keyring

KINDS = (
    "foreign_key_same_kid",
    "unknown_kid",
    "no_kid",
    "alg_none",
    "hs256_public_pem",
    "alg_switch",
    "wrong_audience",
    "wrong_issuer",
    "no_audience",
    "refresh_as_access",
    "tampered_payload",
    "expired_wrong_audience",
    "malformed",
)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(subject: str, /, **changes: Any) -> dict[str, Any]:
    """Claims of a valid access token for ``subject``; ``changes`` set (None: drop) some."""
    now = int(time.time())
    base: dict[str, Any] = {
        "token_type": "access",
        "exp": now + 300,
        "iat": now,
        "jti": uuid.uuid4().hex,
        "sub": subject,
        "aud": settings.SIMPLE_JWT["AUDIENCE"],
        "iss": settings.SIMPLE_JWT["ISSUER"],
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def unsigned(header: dict[str, Any], payload: dict[str, Any]) -> str:
    return b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(payload).encode())


def sign_with_ring(payload: dict[str, Any], *, key: JwtKey | None = None) -> str:
    """Signed exactly like the server does (the ring's signing key and its kid)."""
    key = key or get_keyring().signing
    return jwt.encode(payload, key.private_key, algorithm=key.algorithm, headers={"kid": key.kid})


def forge(kind: str, sub: str) -> str:
    ring_key = get_keyring().signing
    kid = ring_key.kid
    if kind == "control":
        return sign_with_ring(claims(sub))
    if kind in ("foreign_key_same_kid", "unknown_kid"):
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        other_kid = kid if kind == "foreign_key_same_kid" else JwtKey.from_key(other).kid
        return jwt.encode(claims(sub), other, algorithm="RS256", headers={"kid": other_kid})
    if kind == "no_kid":
        return jwt.encode(claims(sub), ring_key.private_key, algorithm=ring_key.algorithm)
    if kind == "alg_none":
        return unsigned({"alg": "none", "typ": "JWT", "kid": kid}, claims(sub)) + "."
    if kind == "hs256_public_pem":
        pem = ring_key.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        signing_input = unsigned({"alg": "HS256", "typ": "JWT", "kid": kid}, claims(sub))
        mac = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
        return signing_input + "." + b64url(mac)
    if kind == "alg_switch":
        # A real signature by the ring key, but under a header naming a different algorithm.
        token = sign_with_ring(claims(sub))
        _, payload, signature = token.split(".")
        other_alg = "RS512" if ring_key.algorithm != "RS256" else "PS256"
        header = b64url(json.dumps({"alg": other_alg, "typ": "JWT", "kid": kid}).encode())
        return f"{header}.{payload}.{signature}"
    if kind == "wrong_audience":
        return sign_with_ring(claims(sub, aud="someone-else"))
    if kind == "wrong_issuer":
        return sign_with_ring(claims(sub, iss="https://evil.example"))
    if kind == "no_audience":
        return sign_with_ring(claims(sub, aud=None))
    if kind == "refresh_as_access":
        return sign_with_ring(claims(sub, token_type="refresh"))
    if kind == "tampered_payload":
        header, _, signature = sign_with_ring(claims(sub)).split(".")
        other = b64url(json.dumps(claims("1" + sub)).encode())
        return f"{header}.{other}.{signature}"
    if kind == "expired_wrong_audience":
        past = int(time.time()) - 3600
        return sign_with_ring(claims(sub, aud="someone-else", exp=past, iat=past - 60))
    if kind == "malformed":
        return "not.a.jwt"
    raise ValueError(kind)
