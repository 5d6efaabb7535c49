"""The auth HTTP endpoints: token pair, refresh, ``me`` and the JWKS (protocol §2)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.test import Client
from rest_framework.settings import api_settings as drf_settings
from rest_framework.throttling import ScopedRateThrottle

from apps.accounts.keys import JwtKey, clear_keyring_cache, get_keyring
from apps.accounts.tokens import decode_access_token, issue_access_token, issue_token_pair
from tests.accounts.forge import KINDS, claims, forge, sign_with_ring
from tests.livesrv import ROOT, child_env, free_port

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/auth/token/"
REFRESH_URL = "/api/auth/token/refresh/"
ME_URL = "/api/auth/me/"
JWKS_URL = "/.well-known/jwks.json"


def obtain(client: Client, email: str, password: str) -> Any:
    return client.post(
        TOKEN_URL, {"email": email, "password": password}, content_type="application/json"
    )


def me(client: Client, token: str | None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return client.get(ME_URL, headers=headers)


def test_obtain_pair_with_email_and_password(client: Client, make_user: Any) -> None:
    user = make_user("ana@example.com")
    assert user.last_login is None
    response = obtain(client, "ana@example.com", "pw-ana@example.com")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"access", "refresh"}
    assert decode_access_token(body["access"])["sub"] == str(user.pk)
    user.refresh_from_db()
    assert user.last_login is not None


def test_obtain_matches_email_case_insensitively(client: Client, make_user: Any) -> None:
    user = make_user("bo@example.com")
    response = obtain(client, "  Bo@Example.COM ", "pw-bo@example.com")
    assert response.status_code == 200
    assert decode_access_token(response.json()["access"])["sub"] == str(user.pk)


def test_obtain_refuses_bad_credentials_with_one_answer(client: Client, make_user: Any) -> None:
    make_user("cy@example.com")
    make_user("off@example.com", is_active=False)
    answers = [
        obtain(client, "cy@example.com", "wrong"),
        obtain(client, "nobody@example.com", "pw-nobody@example.com"),
        obtain(client, "off@example.com", "pw-off@example.com"),
    ]
    for response in answers:
        assert response.status_code == 401
        assert response["Content-Type"] == "application/json"
        assert response.json() == {
            "detail": "No active account found with the given credentials",
            "code": "no_active_account",
        }


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("{}", "application/json"),
        ('{"email": "not-an-email", "password": "x"}', "application/json"),
        ("{not json", "application/json"),
    ],
)
def test_obtain_answers_malformed_requests_with_json_400(
    client: Client, body: str, content_type: str
) -> None:
    response = client.post(TOKEN_URL, body, content_type=content_type)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "access" not in response.json()


def test_obtain_is_throttled_with_the_auth_rate(client: Client) -> None:
    allowed, _ = ScopedRateThrottle().parse_rate(drf_settings.DEFAULT_THROTTLE_RATES["auth"])
    assert allowed == 30
    for _ in range(allowed):
        assert client.post(TOKEN_URL, {}, content_type="application/json").status_code == 400
    response = client.post(TOKEN_URL, {}, content_type="application/json")
    assert response.status_code == 429
    assert response.json()["detail"].startswith("Request was throttled")
    assert int(response["Retry-After"]) > 0


def _wrong_passwords(client: Client, forwarded_for: list[str]) -> list[int]:
    return [
        client.post(
            TOKEN_URL, {"email": "gus@example.com", "password": "wrong"},
            content_type="application/json", headers={"X-Forwarded-For": xff},
        ).status_code
        for xff in forwarded_for
    ]


def test_a_rotating_x_forwarded_for_does_not_escape_the_login_throttle(
    client: Client, make_user: Any
) -> None:
    user = make_user("gus@example.com")
    statuses = _wrong_passwords(client, [f"203.0.113.{i}" for i in range(60)])
    assert statuses == [401] * 30 + [429] * 30
    user.refresh_from_db()
    assert user.last_login is None


def test_behind_one_proxy_the_address_it_appended_is_the_client(
    client: Client, make_user: Any, settings: Any
) -> None:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    make_user("gus@example.com")
    # The client writes whatever it likes left of the address the proxy appends.
    spoofed = [f"203.0.113.{i}, 198.51.100.7" for i in range(31)]
    assert _wrong_passwords(client, spoofed) == [401] * 30 + [429]
    # Another client behind the same proxy (same REMOTE_ADDR) has its own budget.
    assert _wrong_passwords(client, ["198.51.100.7, 198.51.100.8"]) == [401]


@pytest.mark.django_db(transaction=True)
def test_the_procfile_web_process_keys_the_throttle_by_the_peer(make_user: Any) -> None:
    """Daphne's ``--proxy-headers`` takes the leftmost X-Forwarded-For entry (the client's own
    words) as the peer, which would re-open the bypass; the Procfile's web command must not."""
    make_user("gus@example.com")
    (web,) = [line for line in (ROOT / "Procfile").read_text().splitlines()
              if line.startswith("web:")]
    command = web.removeprefix("web:").strip()
    assert " -b 0.0.0.0 " in command
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)
    # The web command as the Procfile has it; the settings differ only in the password hasher.
    env = child_env(PORT=str(port), PATH=f"{bin_dir}:{os.environ['PATH']}",
                    DJANGO_SETTINGS_MODULE="tests.cheap_hashing_settings")
    proc = subprocess.Popen(
        ["sh", "-c", "exec " + command.replace(" -b 0.0.0.0 ", " -b 127.0.0.1 ")],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).close()  # noqa: S310
                break
            except OSError:
                time.sleep(0.1)
        statuses = []
        for i in range(31):
            request = urllib.request.Request(  # noqa: S310
                base + TOKEN_URL, method="POST",
                data=b'{"email": "gus@example.com", "password": "wrong"}',
                headers={"Content-Type": "application/json", "X-Forwarded-For": f"203.0.113.{i}"},
            )
            try:
                urllib.request.urlopen(request, timeout=10).close()  # noqa: S310
                statuses.append(200)
            except urllib.error.HTTPError as exc:
                statuses.append(exc.code)
        assert statuses == [401] * 30 + [429]
    finally:
        proc.terminate()
        proc.wait(10)


def test_refresh_returns_a_new_access_and_refresh_token(client: Client, make_user: Any) -> None:
    user = make_user()
    pair = issue_token_pair(user)
    response = client.post(
        REFRESH_URL, {"refresh": pair["refresh"]}, content_type="application/json"
    )
    assert response.status_code == 200
    access = response.json()["access"]
    assert set(response.json()) == {"access", "refresh"}  # rotation: the old one is used up
    assert response.json()["refresh"] != pair["refresh"]
    assert access != pair["access"]
    got = decode_access_token(access)
    assert got["sub"] == str(user.pk)
    assert got["jti"] != decode_access_token(pair["access"])["jti"]
    assert me(client, access).json() == {"id": user.pk, "email": user.email}


def test_obtain_then_refresh_over_http(client: Client, make_user: Any) -> None:
    user = make_user("dee@example.com")
    pair = obtain(client, "dee@example.com", "pw-dee@example.com").json()
    response = client.post(
        REFRESH_URL, {"refresh": pair["refresh"]}, content_type="application/json"
    )
    assert response.status_code == 200
    assert me(client, response.json()["access"]).json() == {"id": user.pk, "email": user.email}


@pytest.mark.parametrize("which", ["access", "garbage", "alg_none", "expired"])
def test_refresh_refuses_anything_but_a_valid_refresh_token(
    client: Client, make_user: Any, which: str
) -> None:
    user = make_user()
    past = int(time.time()) - 60
    token = {
        "access": issue_access_token(user),
        "garbage": "x.y.z",
        "alg_none": forge("alg_none", str(user.pk)),
        "expired": sign_with_ring(claims(str(user.pk), token_type="refresh", exp=past)),
    }[which]
    response = client.post(REFRESH_URL, {"refresh": token}, content_type="application/json")
    assert response.status_code == 401
    assert response.json()["code"] == "token_not_valid"
    assert "access" not in response.json()


@pytest.mark.parametrize("change", ["delete", "deactivate"])
def test_refresh_refuses_a_user_gone_or_inactive(
    client: Client, make_user: Any, change: str
) -> None:
    user = make_user()
    refresh = issue_token_pair(user)["refresh"]
    if change == "delete":
        user.delete()
    else:
        user.is_active = False
        user.save(update_fields=["is_active"])
    response = client.post(REFRESH_URL, {"refresh": refresh}, content_type="application/json")
    assert response.status_code == 401
    assert response.json() == {
        "detail": "No active account found for the given token.",
        "code": "no_active_account",
    }


def test_me_returns_id_and_email(client: Client, make_user: Any) -> None:
    user = make_user("eve@example.com")
    response = me(client, issue_access_token(user))
    assert response.status_code == 200
    assert response.json() == {"id": user.pk, "email": "eve@example.com"}


def test_me_refuses_a_missing_token(client: Client) -> None:
    response = me(client, None)
    assert response.status_code == 401
    assert response.json() == {"detail": "Authentication credentials were not provided."}
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_me_refuses_an_expired_token(client: Client, make_user: Any) -> None:
    user = make_user()
    response = me(client, issue_access_token(user, lifetime=timedelta(minutes=-5)))
    assert response.status_code == 401
    assert response.json()["code"] == "token_not_valid"


def test_me_accepts_the_forged_control_token(client: Client, make_user: Any) -> None:
    user = make_user()
    assert me(client, forge("control", str(user.pk))).status_code == 200


@pytest.mark.parametrize("kind", KINDS)
def test_me_refuses_forged_tokens(client: Client, make_user: Any, kind: str) -> None:
    user = make_user()
    response = me(client, forge(kind, str(user.pk)))
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "token_not_valid"


def test_me_refuses_a_valid_token_of_an_inactive_user(client: Client, make_user: Any) -> None:
    user = make_user(is_active=False)
    response = me(client, issue_access_token(user))
    assert response.status_code == 401
    assert response.json()["code"] == "user_inactive"


def test_jwks_alone_verifies_an_issued_token(client: Client, make_user: Any) -> None:
    user = make_user()
    token = issue_token_pair(user)["access"]
    response = client.get(JWKS_URL)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "public, max-age=300"
    document = response.json()
    kid = jwt.get_unverified_header(token)["kid"]
    (jwk,) = [key for key in document["keys"] if key["kid"] == kid]
    assert (jwk["kty"], jwk["alg"], jwk["use"]) == ("RSA", "RS256", "sig")
    assert not {"d", "p", "q", "dp", "dq", "qi"} & set(jwk)
    public = jwt.PyJWK(jwk).key
    got = jwt.decode(
        token,
        public,
        algorithms=[jwk["alg"]],
        audience=settings.SIMPLE_JWT["AUDIENCE"],
        issuer=settings.SIMPLE_JWT["ISSUER"],
    )
    assert got["sub"] == str(user.pk)


def test_jwks_needs_no_auth_and_honours_etag(client: Client) -> None:
    first = client.get(JWKS_URL, headers={"Authorization": "Bearer garbage"})
    assert first.status_code == 200
    again = client.get(JWKS_URL, headers={"If-None-Match": first["ETag"]})
    assert again.status_code == 304
    assert again.content == b""


def test_retired_key_keeps_verifying_and_is_published(
    client: Client, make_user: Any, key_dir: Path
) -> None:
    user = make_user()
    get_keyring()
    old = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    old_key = JwtKey.from_key(old)
    token = jwt.encode(claims(str(user.pk)), old, algorithm="RS256", headers={"kid": old_key.kid})
    assert me(client, token).status_code == 401  # not in the ring yet

    retired = key_dir / "retired-2026-01.pem"
    retired.write_bytes(
        old.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    clear_keyring_cache()
    assert me(client, token).json() == {"id": user.pk, "email": user.email}
    assert decode_access_token(token)["sub"] == str(user.pk)
    kids = [key["kid"] for key in client.get(JWKS_URL).json()["keys"]]
    assert kids == [get_keyring().signing.kid, old_key.kid]
    # New tokens are still signed by the active key, never by a retired one.
    assert jwt.get_unverified_header(issue_access_token(user))["kid"] == kids[0]

    retired.unlink()
    clear_keyring_cache()
    assert me(client, token).status_code == 401


@pytest.mark.parametrize(
    ("algorithm", "kty", "crv"), [("ES256", "EC", "P-256"), ("EdDSA", "OKP", "Ed25519")]
)
def test_es256_and_eddsa_are_selectable(
    client: Client, make_user: Any, settings: Any, key_dir: Path, algorithm: str, kty: str, crv: str
) -> None:
    user = make_user("fay@example.com")
    rs256_token = issue_access_token(user)
    settings.RTC_JWT_ALGORITHM = algorithm
    clear_keyring_cache()

    pair = obtain(client, "fay@example.com", "pw-fay@example.com").json()
    header = jwt.get_unverified_header(pair["access"])
    assert header["alg"] == algorithm
    assert (key_dir / f"{algorithm.lower()}.pem").exists()
    (jwk,) = client.get(JWKS_URL).json()["keys"]
    assert (jwk["kid"], jwk["kty"], jwk["crv"], jwk["alg"]) == (header["kid"], kty, crv, algorithm)
    got = jwt.decode(
        pair["access"],
        jwt.PyJWK(jwk).key,
        algorithms=[algorithm],
        audience=settings.SIMPLE_JWT["AUDIENCE"],
        issuer=settings.SIMPLE_JWT["ISSUER"],
    )
    assert got["sub"] == str(user.pk)
    assert me(client, pair["access"]).json() == {"id": user.pk, "email": "fay@example.com"}
    refreshed = client.post(
        REFRESH_URL, {"refresh": pair["refresh"]}, content_type="application/json"
    )
    assert jwt.get_unverified_header(refreshed.json()["access"])["alg"] == algorithm
    # The RS256 key is not retired, so its tokens no longer verify.
    assert me(client, rs256_token).status_code == 401
    for kind in ("alg_none", "hs256_public_pem", "alg_switch", "foreign_key_same_kid"):
        assert me(client, forge(kind, str(user.pk))).status_code == 401


def test_wrong_http_method_gets_json_405(client: Client) -> None:
    response = client.get(TOKEN_URL)
    assert response.status_code == 405
    assert response.json() == {"detail": 'Method "GET" not allowed.'}
