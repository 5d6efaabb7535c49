"""The JWT signing keyring: one active private key, plus retired public keys that still verify.

Invariants:

- The active key signs with ``settings.RTC_JWT_ALGORITHM`` (RS256, ES256 or EdDSA). It comes
  from ``settings.RTC_JWT_PRIVATE_KEY`` (PEM, from the environment) when set, otherwise from
  ``<RTC_JWT_KEY_DIR>/<algorithm>.pem``, generated on first use.
- Generation happens once per key directory and algorithm, even with several processes starting
  together: an exclusive ``flock`` on ``<dir>/.lock`` serialises it, and the key is written with
  mode 0600 to a temporary name and renamed into place, so no reader sees half a key.
- ``<RTC_JWT_KEY_DIR>/retired-*.pem`` (private or public PEM) still verify and are published in
  the JWKS. Every key is bound to the one algorithm its type implies; a token is only ever checked
  with its key's algorithm, never with the one its header asks for.
- ``kid`` is the RFC 7638 JWK thumbprint (SHA-256, base64url) of the public key.
- The ring is loaded once per process and cached; the cache follows the three settings (so
  ``override_settings`` reloads it) and ``clear_keyring_cache()`` forces a re-read of the folder.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

logger = logging.getLogger(__name__)

ALGORITHMS = ("RS256", "ES256", "EdDSA")
RSA_KEY_BITS = 2048
RETIRED_PATTERN = "retired-*.pem"
LOCK_NAME = ".lock"

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey
_PRIVATE_TYPES = (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey)

# RFC 7638 §3.2 / RFC 8037 §2: the members that enter the thumbprint, per key type.
_THUMBPRINT_MEMBERS = {
    "RSA": ("e", "kty", "n"),
    "EC": ("crv", "kty", "x", "y"),
    "OKP": ("crv", "kty", "x"),
}


def key_file_name(algorithm: str) -> str:
    """The file holding the generated key for ``algorithm`` (one file per algorithm)."""
    return f"{algorithm.lower()}.pem"


def algorithm_for_key(key: PrivateKey | PublicKey) -> str:
    """The JWS algorithm a key is used with; ``ValueError`` for a key type we do not sign with."""
    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        if key.key_size < RSA_KEY_BITS:
            raise ValueError(f"RSA keys must have at least {RSA_KEY_BITS} bits")
        return "RS256"
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError("EC keys must be on P-256 (ES256)")
        return "ES256"
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return "EdDSA"
    raise ValueError(f"unsupported key type {type(key).__name__}")


def generate_private_key(algorithm: str) -> PrivateKey:
    """A fresh private key for ``algorithm``."""
    if algorithm == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS)
    if algorithm == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if algorithm == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    raise ImproperlyConfigured(f"RTC_JWT_ALGORITHM must be one of {', '.join(ALGORITHMS)}")


def public_jwk(public_key: PublicKey) -> dict[str, str]:
    """The public JWK members of a key (``kty`` and its parameters, nothing else)."""
    if isinstance(public_key, rsa.RSAPublicKey):
        jwk = RSAAlgorithm.to_jwk(public_key, as_dict=True)
    elif isinstance(public_key, ec.EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(public_key, as_dict=True)
    else:
        jwk = OKPAlgorithm.to_jwk(public_key, as_dict=True)
    return {name: jwk[name] for name in _THUMBPRINT_MEMBERS[jwk["kty"]]}


def jwk_thumbprint(jwk: Mapping[str, Any]) -> str:
    """RFC 7638 thumbprint: SHA-256 of the required members in canonical JSON, base64url."""
    members = {name: jwk[name] for name in _THUMBPRINT_MEMBERS[jwk["kty"]]}
    canonical = json.dumps(members, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode("utf-8")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class JwtKey:
    """One key of the ring; ``private_key`` is ``None`` for a key that only verifies."""

    kid: str
    algorithm: str
    public_key: PublicKey = field(repr=False)
    private_key: PrivateKey | None = field(default=None, repr=False)

    @classmethod
    def from_key(cls, key: PrivateKey | PublicKey) -> JwtKey:
        algorithm = algorithm_for_key(key)
        if isinstance(key, _PRIVATE_TYPES):
            public, private = key.public_key(), key
        else:
            public, private = key, None
        return cls(jwk_thumbprint(public_jwk(public)), algorithm, public, private)

    def jwk(self) -> dict[str, str]:
        """The JWKS entry: public parameters with ``kid``, ``alg`` and ``use``."""
        return {**public_jwk(self.public_key), "kid": self.kid, "alg": self.algorithm, "use": "sig"}


@dataclass(frozen=True)
class Keyring:
    """The active signing key and every key that verifies (the signing key included)."""

    signing: JwtKey
    verifying: Mapping[str, JwtKey]

    def get(self, kid: str) -> JwtKey | None:
        return self.verifying.get(kid)

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        """The JWK Set document: the signing key first, then retired keys by file order."""
        return {"keys": [key.jwk() for key in self.verifying.values()]}


def _load_pem(data: bytes, source: str) -> PrivateKey | PublicKey:
    try:
        if b"PRIVATE KEY" in data:
            key: Any = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_pem_public_key(data)
        algorithm_for_key(key)
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(f"{source}: not a usable JWT key ({exc})") from exc
    return key


def _write_private_key(path: Path, key: PrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # left by a crashed process that had our pid; we hold the lock
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask can only narrow it, but say it explicitly
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read_key_file(path: Path) -> PrivateKey:
    if path.stat().st_mode & 0o077:
        logger.warning("JWT key file %s is readable by group or others; chmod 600 it", path)
    key = _load_pem(path.read_bytes(), str(path))
    if not isinstance(key, _PRIVATE_TYPES):
        raise ImproperlyConfigured(f"{path}: holds a public key, a private key is needed to sign")
    return key


def load_or_create_private_key(key_dir: Path, algorithm: str) -> PrivateKey:
    """The private key in ``key_dir`` for ``algorithm``, generated under a file lock if missing."""
    path = Path(key_dir) / key_file_name(algorithm)
    if path.exists():  # written by rename, so an existing file is always complete
        return _read_key_file(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock_fd = os.open(path.parent / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        # Another process may have generated it while we waited for the lock.
        if path.exists():
            return _read_key_file(path)
        key = generate_private_key(algorithm)
        _write_private_key(path, key)
        logger.info("generated a new %s JWT signing key in %s", algorithm, path)
        return key
    finally:
        os.close(lock_fd)  # closing releases the flock


def _env_private_key(pem: str) -> PrivateKey:
    if "-----" in pem and "\n" not in pem:
        pem = pem.replace("\\n", "\n")  # one-line env values often carry escaped newlines
    key = _load_pem(pem.strip().encode(), "RTC_JWT_PRIVATE_KEY")
    if not isinstance(key, _PRIVATE_TYPES):
        raise ImproperlyConfigured("RTC_JWT_PRIVATE_KEY must be a private key (PEM)")
    return key


def build_keyring(*, algorithm: str, key_dir: Path, private_key_pem: str = "") -> Keyring:
    """Load (or generate) the signing key and the retired keys; no caching."""
    if algorithm not in ALGORITHMS:
        raise ImproperlyConfigured(f"RTC_JWT_ALGORITHM must be one of {', '.join(ALGORITHMS)}")
    if private_key_pem:
        signing = JwtKey.from_key(_env_private_key(private_key_pem))
        if signing.algorithm != algorithm:
            raise ImproperlyConfigured(
                f"RTC_JWT_PRIVATE_KEY is a {signing.algorithm} key, "
                f"but RTC_JWT_ALGORITHM is {algorithm}"
            )
    else:
        signing = JwtKey.from_key(load_or_create_private_key(key_dir, algorithm))
    verifying = {signing.kid: signing}
    key_dir = Path(key_dir)
    retired_paths = sorted(key_dir.glob(RETIRED_PATTERN)) if key_dir.is_dir() else []
    for path in retired_paths:
        key = JwtKey.from_key(_load_pem(path.read_bytes(), str(path)))
        verifying.setdefault(key.kid, JwtKey(key.kid, key.algorithm, key.public_key))
    return Keyring(signing=signing, verifying=verifying)


_cache_lock = threading.Lock()
_cache: tuple[tuple[str, str, str], Keyring] | None = None


def get_keyring() -> Keyring:
    """The process-wide keyring for the current settings (loaded once, then cached)."""
    global _cache
    config = (
        settings.RTC_JWT_ALGORITHM,
        str(settings.RTC_JWT_KEY_DIR),
        getattr(settings, "RTC_JWT_PRIVATE_KEY", ""),
    )
    cached = _cache
    if cached is not None and cached[0] == config:
        return cached[1]
    with _cache_lock:
        if _cache is None or _cache[0] != config:
            algorithm, key_dir, pem = config
            ring = build_keyring(algorithm=algorithm, key_dir=Path(key_dir), private_key_pem=pem)
            _cache = (config, ring)
        return _cache[1]


def clear_keyring_cache() -> None:
    """Forget the loaded keys; the next ``get_keyring()`` reads them again (e.g. after rotation)."""
    global _cache
    with _cache_lock:
        _cache = None
