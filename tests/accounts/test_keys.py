"""The signing keyring (``apps.accounts.keys``): generation, files, kid, cache, algorithms."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from apps.accounts.keys import clear_keyring_cache, get_keyring, load_or_create_private_key


def private_pem(key: Any) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def b64url_uint(number: int) -> str:
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_key_is_generated_once_with_private_file_mode(key_dir: Path) -> None:
    assert not key_dir.exists()
    kid = get_keyring().signing.kid
    path = key_dir / "rs256.pem"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_dir.stat().st_mode) == 0o700
    content = path.read_bytes()
    clear_keyring_cache()
    assert get_keyring().signing.kid == kid
    assert path.read_bytes() == content
    assert sorted(p.name for p in key_dir.iterdir()) == [".lock", "rs256.pem"]


def test_keyring_is_cached_per_process(key_dir: Path) -> None:
    ring = get_keyring()
    (key_dir / "rs256.pem").unlink()
    assert get_keyring() is ring  # no disk access while cached
    clear_keyring_cache()
    assert get_keyring().signing.kid != ring.signing.kid  # the file was gone: a new key


CHILD = """
import pathlib, sys, time
from apps.accounts.keys import JwtKey, load_or_create_private_key
key_dir, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.0005)
print(JwtKey.from_key(load_or_create_private_key(key_dir, "RS256")).kid, flush=True)
"""


@pytest.mark.slow
def test_concurrent_generation_in_several_processes_yields_one_key(tmp_path: Path) -> None:
    key_dir, go = tmp_path / "shared-keys", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(key_dir), str(go)],
            cwd=settings.BASE_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    go.touch()  # all four race for the key from here
    results = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0, 0], results
    kids = {out.strip() for out, _ in results}
    assert len(kids) == 1
    assert sorted(p.name for p in key_dir.iterdir()) == [".lock", "rs256.pem"]
    from apps.accounts.keys import JwtKey

    assert JwtKey.from_key(load_or_create_private_key(key_dir, "RS256")).kid == kids.pop()


def test_kid_is_the_rfc7638_thumbprint_of_an_rsa_key(settings: Any) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    settings.RTC_JWT_PRIVATE_KEY = private_pem(key)
    numbers = key.public_key().public_numbers()
    canonical = (
        f'{{"e":"{b64url_uint(numbers.e)}","kty":"RSA","n":"{b64url_uint(numbers.n)}"}}'
    ).encode()
    expected = base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=")
    assert get_keyring().signing.kid == expected.decode()


def test_kid_matches_the_rfc8037_ed25519_thumbprint_example(settings: Any) -> None:
    # RFC 8037 appendix A.1-A.3: the example key and its published JWK thumbprint.
    d = base64.urlsafe_b64decode("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=")
    key = ed25519.Ed25519PrivateKey.from_private_bytes(d)
    settings.RTC_JWT_ALGORITHM = "EdDSA"
    settings.RTC_JWT_PRIVATE_KEY = private_pem(key)
    ring = get_keyring()
    assert ring.signing.jwk()["x"] == "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    assert ring.signing.kid == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_private_key_from_settings_is_used_and_nothing_is_generated(
    settings: Any, key_dir: Path
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    settings.RTC_JWT_ALGORITHM = "ES256"
    # As a one-line environment value with escaped newlines.
    settings.RTC_JWT_PRIVATE_KEY = private_pem(key).replace("\n", "\\n")
    ring = get_keyring()
    assert ring.signing.algorithm == "ES256"
    assert ring.signing.jwk()["x"] == b64url_uint(key.public_key().public_numbers().x).rjust(
        43, "A"
    )
    assert not key_dir.exists()


@pytest.mark.parametrize(
    ("algorithm", "make_key"),
    [
        ("ES256", lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        ("RS256", lambda: ec.generate_private_key(ec.SECP384R1())),
        ("EdDSA", lambda: ec.generate_private_key(ec.SECP256R1())),
        ("RS256", lambda: rsa.generate_private_key(public_exponent=65537, key_size=1024)),  # noqa: S505
    ],
)
def test_private_key_not_matching_the_algorithm_is_refused(
    settings: Any, algorithm: str, make_key: Any
) -> None:
    settings.RTC_JWT_ALGORITHM = algorithm
    settings.RTC_JWT_PRIVATE_KEY = private_pem(make_key())
    with pytest.raises(ImproperlyConfigured):
        get_keyring()


def test_one_key_file_per_algorithm(settings: Any, key_dir: Path) -> None:
    kids = {}
    for algorithm in ("RS256", "ES256", "EdDSA"):
        settings.RTC_JWT_ALGORITHM = algorithm
        ring = get_keyring()
        assert ring.signing.algorithm == algorithm
        assert list(ring.verifying) == [ring.signing.kid]  # other algorithms' files: not keys
        kids[algorithm] = ring.signing.kid
    assert len(set(kids.values())) == 3
    assert sorted(p.name for p in key_dir.glob("*.pem")) == ["eddsa.pem", "es256.pem", "rs256.pem"]
    for path in key_dir.glob("*.pem"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    settings.RTC_JWT_ALGORITHM = "RS256"
    assert get_keyring().signing.kid == kids["RS256"]


def test_retired_keys_verify_and_are_published(key_dir: Path) -> None:
    active = get_keyring().signing
    old_rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    old_ed = ed25519.Ed25519PrivateKey.generate()
    (key_dir / "retired-2026-01.pem").write_text(private_pem(old_rsa))
    (key_dir / "retired-2026-02.pem").write_bytes(
        old_ed.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    (key_dir / "notes.pem.bak").write_text("ignored")
    clear_keyring_cache()
    ring = get_keyring()
    assert ring.signing.kid == active.kid
    assert len(ring.verifying) == 3
    published = ring.jwks()["keys"]
    assert published[0]["kid"] == active.kid
    assert [(k["kty"], k["alg"], k["use"]) for k in published] == [
        ("RSA", "RS256", "sig"),
        ("RSA", "RS256", "sig"),
        ("OKP", "EdDSA", "sig"),
    ]
    for entry in published:
        assert ring.get(entry["kid"]) is not None
        assert ring.get(entry["kid"]).private_key is None or entry["kid"] == active.kid
        assert not {"d", "p", "q", "dp", "dq", "qi"} & set(entry)


def test_unreadable_retired_key_fails_loudly(key_dir: Path) -> None:
    get_keyring()
    (key_dir / "retired-broken.pem").write_text("-----BEGIN PUBLIC KEY-----\nnope\n")
    clear_keyring_cache()
    with pytest.raises(ImproperlyConfigured):
        get_keyring()


def test_jwks_document_is_json_serialisable_with_sorted_members() -> None:
    jwk = get_keyring().jwks()["keys"][0]
    assert set(jwk) == {"kty", "n", "e", "kid", "alg", "use"}
    assert json.loads(json.dumps(jwk)) == jwk
