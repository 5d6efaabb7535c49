"""Issue 7, hostile input (server side): tokens an attacker writes, on every door that takes one.

The doors are ``GET /api/auth/me/`` (any access-token endpoint), ``POST
/api/auth/token/refresh/``, the gateway's ``connect`` and ``refresh`` (a raw WebSocket client
against a Daphne of this module, started with ``RTC_EXPIRED_CLOSE_DELAY`` = 1 s), the RTC result
endpoint, the admin and the staff token endpoint. Every refusal is asserted twice: the documented
answer (status and JSON body, or the disconnect push and close code of protocol §3.9), and that
nothing changed: no row in any table, no Redis key, no socket left open on the server.

Header-named keys (``jku``, ``x5u``, ``jwk``, ``x5c``) point at ``RecordingServer``, a local
HTTP server that answers anything and records every request: it must never hear from us.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from django.apps import apps
from django.contrib.auth import get_user_model
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from apps.accounts.keys import JwtKey, get_keyring
from apps.accounts.tokens import (
    RefreshToken,
    decode_access_token,
    issue_access_token,
    issue_token_pair,
)
from rtcagent import keys
from rtcagent.redis import get_redis
from tests.accounts.forge import claims, sign_with_ring, unsigned
from tests.livesrv import LiveServer, start_daphne
from tests.sessions.factories import make_message, make_rtc, make_session, make_turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EXPIRED_CLOSE_DELAY = 1.0  # seconds, for this module's Daphne (the default is 25)

INVALID_ACCESS = {
    "detail": "Given token not valid for any token type",
    "code": "token_not_valid",
    "messages": [
        {"token_class": "AccessToken", "token_type": "access", "message": "Token is invalid"}
    ],
}
INVALID_REFRESH = {"detail": "Token is invalid", "code": "token_not_valid"}
DISCONNECT_INVALID = {"push": {"disconnect": {"code": 3500, "reason": "invalid token"}}}
DISCONNECT_EXPIRED = {"push": {"disconnect": {"code": 3005, "reason": "connection expired"}}}


# --- a server that records whoever calls it -------------------------------------------------


class RecordingServer:
    """A local HTTP server answering every method and path with 200 (and CORS for anyone),
    recording each request as ``(method, path)``. ``documents`` maps a path to
    ``(content type, body)``; any other path gets a small JavaScript module."""

    def __init__(self, documents: dict[str, tuple[str, bytes]] | None = None) -> None:
        self.requests: list[tuple[str, str]] = []
        self.documents = dict(documents or {})
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                recorder.requests.append((self.command, self.path))
                kind, body = recorder.documents.get(
                    self.path, ("text/javascript", b"export default 'reached';\n")
                )
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Access-Control-Allow-Headers", "*")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_HEAD = do_OPTIONS = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> RecordingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def daphne(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    server = start_daphne(
        tmp_path_factory.mktemp("hostile"), RTC_EXPIRED_CLOSE_DELAY=str(EXPIRED_CLOSE_DELAY)
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def attacker_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def recorder(attacker_key: rsa.RSAPrivateKey) -> Iterator[RecordingServer]:
    """Serves the attacker's JWKS (``/jwks.json``) and certificate (``/cert.pem``)."""
    jwks = json.dumps({"keys": [JwtKey.from_key(attacker_key).jwk()]}).encode()
    pem = _self_signed(attacker_key).public_bytes(serialization.Encoding.PEM)
    documents = {"/jwks.json": ("application/json", jwks), "/cert.pem": ("text/plain", pem)}
    with RecordingServer(documents) as server:
        yield server


@pytest.fixture(autouse=True)
def _recorder_reset(request: pytest.FixtureRequest) -> None:
    if "recorder" in request.fixturenames:
        request.getfixturevalue("recorder").requests.clear()


# --- helpers ---------------------------------------------------------------------------------


def _self_signed(key: rsa.RSAPrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rtcagent")])
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )


def _state() -> tuple[dict[str, int], list[str]]:
    """Rows of every model and every Redis key: what a refusal must leave as it was. The web
    processes' own reports (``rtc:ops:``, socket counts for the operator console) are not
    state a request can change, so they are left out."""
    rows = {m._meta.label: m._base_manager.count() for m in apps.get_models()}
    return rows, sorted(k for k in get_redis().keys("*") if not k.startswith("rtc:ops:"))


def _with_epoch(state: tuple[dict[str, int], list[str]], user: Any) -> tuple[
        dict[str, int], list[str]]:
    """``state`` plus the user's topic epoch: all a genuine connect leaves once its socket is
    gone (its channel-layer groups go with it)."""
    rows, redis_keys = state
    return rows, sorted({*redis_keys, keys.topic_epoch(user.pk)})


def _open_sockets(port: int) -> int:
    """The server's accepted TCP connections still open (ESTABLISHED or CLOSE_WAIT)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] in ("01", "08"):
                count += 1
    return count


def _assert_no_open_sockets(server: LiveServer) -> None:
    deadline = time.monotonic() + 3
    while _open_sockets(server.port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _open_sockets(server.port) == 0


def _assert_nothing_left(
    server: LiveServer, before: tuple[dict[str, int], list[str]], connected: Any = None
) -> None:
    """No socket open on the server, and the rows and Redis keys of ``before`` (plus the topic
    epoch of the user that ``connected`` for real, if any)."""
    _assert_no_open_sockets(server)
    assert _state() == (before if connected is None else _with_epoch(before, connected))


def _lines(ws: ClientConnection, timeout: float = 5) -> list[dict[str, Any]]:
    frame = ws.recv(timeout=timeout)
    assert isinstance(frame, str)
    return [json.loads(line) for line in frame.split("\n")]


def _until_closed(ws: ClientConnection, timeout: float = 5) -> tuple[int, list[dict[str, Any]]]:
    """Everything the server sends until it closes; the close code and those lines."""
    seen: list[dict[str, Any]] = []
    try:
        while True:
            seen += _lines(ws, timeout)
    except ConnectionClosed as exc:
        assert exc.rcvd is not None, "the server closed the connection"
        return exc.rcvd.code, seen


@contextmanager
def _ws_connect(
    server: LiveServer, token: Any
) -> Iterator[tuple[ClientConnection, list[dict[str, Any]]]]:
    """A raw socket that sent ``connect``, and the lines of the first frame answering it."""
    with ws_connect(server.ws_url) as ws:
        ws.send(json.dumps({"id": 1, "connect": {"token": token}}))
        yield ws, _lines(ws)


def _gateway_refuses(server: LiveServer, token: Any) -> tuple[int, list[dict[str, Any]]]:
    with ws_connect(server.ws_url) as ws:
        ws.send(json.dumps({"id": 1, "connect": {"token": token}}))
        return _until_closed(ws)


def _rpc(ws: ClientConnection, cid: int, method: str, data: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps({"id": cid, "rpc": {"method": method, "data": data}}))
    while True:
        for line in _lines(ws):
            if line.get("id") == cid:
                return line


def _bearer(token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {token}"})


def _refresh(token: str) -> Any:
    return Client().post(
        "/api/auth/token/refresh/", {"refresh": token}, content_type="application/json"
    )


def _refused_everywhere(daphne: LiveServer, access: str, refresh: str) -> None:
    """``access`` refused by ``me`` and the gateway, ``refresh`` by the refresh endpoint, each
    with its documented answer, and nothing changed."""
    before = _state()
    me = _bearer(access).get("/api/auth/me/")
    assert (me.status_code, me.json()) == (401, INVALID_ACCESS)
    assert "sessionid" not in me.cookies
    refreshed = _refresh(refresh)
    assert (refreshed.status_code, refreshed.json()) == (401, INVALID_REFRESH)
    assert _gateway_refuses(daphne, access) == (3500, [DISCONNECT_INVALID])
    _assert_nothing_left(daphne, before)


# --- 1. alg: none ----------------------------------------------------------------------------

NONE_CASINGS = ["none", "None", "NONE", "nOnE"]
SIGNATURES = ["empty", "absent", "genuine"]


def _alg_none(alg: str, signature: str, payload: dict[str, Any]) -> str:
    header = {"alg": alg, "typ": "JWT", "kid": get_keyring().signing.kid}
    body = unsigned(header, payload)
    if signature == "empty":
        return body + "."
    if signature == "absent":
        return body
    # The signature of a genuine token of the same claims, under the "none" header.
    return body + "." + sign_with_ring(payload).split(".")[2]


@pytest.mark.parametrize("signature", SIGNATURES)
@pytest.mark.parametrize("alg", NONE_CASINGS)
def test_alg_none_is_refused_everywhere(
    daphne: LiveServer, make_user: Any, alg: str, signature: str
) -> None:
    user = make_user()
    access = _alg_none(alg, signature, claims(str(user.pk)))
    refresh = _alg_none(alg, signature, claims(str(user.pk), token_type="refresh"))
    _refused_everywhere(daphne, access, refresh)


# --- 2. keys named by the token: jku, x5u, jwk, x5c ------------------------------------------

KEY_HEADERS = ["jku", "x5u", "jwk", "x5c"]
KIDS = ["attacker", "ring", "none"]


def _key_header(name: str, recorder: RecordingServer, key: rsa.RSAPrivateKey) -> Any:
    if name == "jku":
        return f"{recorder.url}/jwks.json"
    if name == "x5u":
        return f"{recorder.url}/cert.pem"
    if name == "jwk":
        return JwtKey.from_key(key).jwk()
    return [base64.b64encode(_self_signed(key).public_bytes(serialization.Encoding.DER)).decode()]


def _signed_by(key: rsa.RSAPrivateKey, payload: dict[str, Any], headers: dict[str, Any]) -> str:
    return jwt.encode(payload, key, algorithm="RS256", headers=headers)


@pytest.mark.parametrize("kid", KIDS)
@pytest.mark.parametrize("header", KEY_HEADERS)
def test_a_key_named_by_the_token_is_never_fetched_nor_trusted(
    daphne: LiveServer, recorder: RecordingServer, attacker_key: rsa.RSAPrivateKey,
    make_user: Any, header: str, kid: str,
) -> None:
    user = make_user()
    headers: dict[str, Any] = {header: _key_header(header, recorder, attacker_key)}
    if kid != "none":
        headers["kid"] = JwtKey.from_key(attacker_key).kid if kid == "attacker" else (
            get_keyring().signing.kid)
    access = _signed_by(attacker_key, claims(str(user.pk)), headers)
    refresh = _signed_by(attacker_key, claims(str(user.pk), token_type="refresh"), headers)
    _refused_everywhere(daphne, access, refresh)
    assert recorder.requests == []


def test_key_headers_on_a_genuine_token_are_ignored(
    daphne: LiveServer, recorder: RecordingServer, attacker_key: rsa.RSAPrivateKey,
    make_user: Any,
) -> None:
    user = make_user()
    ring = get_keyring().signing
    headers = {name: _key_header(name, recorder, attacker_key) for name in KEY_HEADERS}
    headers["kid"] = ring.kid
    access = jwt.encode(claims(str(user.pk)), ring.private_key, algorithm=ring.algorithm,
                        headers=headers)
    # a refresh token must belong to a login (family): re-sign a genuine one's claims
    genuine = jwt.decode(issue_token_pair(user)["refresh"], options={"verify_signature": False})
    refresh = jwt.encode(genuine, ring.private_key, algorithm=ring.algorithm, headers=headers)
    me = _bearer(access).get("/api/auth/me/")
    assert (me.status_code, me.json()) == (200, {"id": user.pk, "email": user.email})
    refreshed = _refresh(refresh)
    assert refreshed.status_code == 200 and set(refreshed.json()) == {"access", "refresh"}
    with _ws_connect(daphne, access) as (_, (reply,)):
        assert reply["connect"]["data"]["user_id"] == user.pk
    assert recorder.requests == []


# --- 3. a token that expires while its socket is open ----------------------------------------


def _token_expiring_in(user: Any, seconds: float) -> tuple[str, float]:
    token = issue_access_token(user, lifetime=dt.timedelta(seconds=seconds))
    return token, float(decode_access_token(token)["exp"])


def test_an_unrefreshed_socket_is_closed_3005_after_the_delay(
    daphne: LiveServer, make_user: Any
) -> None:
    user = make_user()
    token, exp = _token_expiring_in(user, 3)
    before = _state()
    with _ws_connect(daphne, token) as (ws, (reply,)):
        # The refresh prompt: clients call refresh `ttl` seconds after connect.
        assert reply["connect"]["expires"] is True
        assert 1 <= reply["connect"]["ttl"] <= 3
        code, lines = _until_closed(ws, timeout=10)
        closed_at = time.time()
    assert (code, lines) == (3005, [DISCONNECT_EXPIRED])
    assert exp + EXPIRED_CLOSE_DELAY - 0.3 <= closed_at <= exp + EXPIRED_CLOSE_DELAY + 3
    _assert_nothing_left(daphne, before, user)


def test_a_socket_refreshed_in_time_outlives_its_first_token(
    daphne: LiveServer, make_user: Any
) -> None:
    user = make_user()
    token, exp = _token_expiring_in(user, 3)
    with _ws_connect(daphne, token) as (ws, (reply,)):
        ws.send(json.dumps({"id": 2, "refresh": {"token": issue_access_token(user)}}))
        (refreshed,) = _lines(ws)
        assert refreshed["refresh"]["client"] == reply["connect"]["client"]
        assert refreshed["refresh"]["expires"] is True and refreshed["refresh"]["ttl"] > 60
        time.sleep(max(0.0, exp + EXPIRED_CLOSE_DELAY + 1 - time.time()))
        answer = _rpc(ws, 3, "v1.session.list", {})
        assert answer["rpc"]["data"] == {"items": [], "next_cursor": ""}


def test_refresh_with_an_expired_token_closes_3005(daphne: LiveServer, make_user: Any) -> None:
    user = make_user()
    before = _state()
    with _ws_connect(daphne, issue_access_token(user)) as (ws, _):
        expired = issue_access_token(user, lifetime=dt.timedelta(minutes=-5))
        ws.send(json.dumps({"id": 2, "refresh": {"token": expired}}))
        assert _until_closed(ws) == (3005, [DISCONNECT_EXPIRED])
    _assert_nothing_left(daphne, before, user)


def test_connect_with_an_expired_token_answers_109_and_keeps_the_socket(
    daphne: LiveServer, make_user: Any
) -> None:
    user = make_user()
    before = _state()
    expired = issue_access_token(user, lifetime=dt.timedelta(minutes=-5))
    with _ws_connect(daphne, expired) as (ws, lines):
        assert lines == [{"id": 1, "error": {"code": 109, "message": "token expired"}}]
        assert _state() == before
        # Still open: the client fetches a new token and connects on the same socket.
        ws.send(json.dumps({"id": 2, "connect": {"token": issue_access_token(user)}}))
        (reply,) = _lines(ws)
        assert reply["id"] == 2 and reply["connect"]["data"]["user_id"] == user.pk


# --- 4. token kinds and privilege ------------------------------------------------------------


def test_a_refresh_token_is_no_access_token(daphne: LiveServer, make_user: Any) -> None:
    user = make_user()
    rtc = make_rtc(make_turn(make_session(user), status="interrupted"), status="pending")
    refresh = str(RefreshToken.for_user(user))
    before = _state()
    me = _bearer(refresh).get("/api/auth/me/")
    wrong_type = {**INVALID_ACCESS, "messages": [
        {**INVALID_ACCESS["messages"][0], "message": "Token has wrong type"}]}
    assert (me.status_code, me.json()) == (401, wrong_type)
    result = _bearer(refresh).post(f"/api/rtc/{rtc.id}/result", {"success": True, "result": "x"},
                                   content_type="application/json")
    assert (result.status_code, result.json()) == (401, wrong_type)
    assert _gateway_refuses(daphne, refresh) == (3500, [DISCONNECT_INVALID])
    _assert_nothing_left(daphne, before)


def test_a_refresh_token_cannot_refresh_a_socket(daphne: LiveServer, make_user: Any) -> None:
    user = make_user()
    before = _state()
    with _ws_connect(daphne, issue_access_token(user)) as (ws, _):
        ws.send(json.dumps({"id": 2, "refresh": {"token": str(RefreshToken.for_user(user))}}))
        assert _until_closed(ws) == (3500, [DISCONNECT_INVALID])
    _assert_nothing_left(daphne, before, user)


def test_an_access_token_is_no_refresh_token(make_user: Any) -> None:
    user = make_user()
    before = _state()
    reply = _refresh(issue_access_token(user))
    assert (reply.status_code, reply.json()) == (
        401, {"detail": "Token has wrong type", "code": "token_not_valid"})
    assert _state() == before


def test_a_superusers_token_sees_only_the_superusers_own_data(
    daphne: LiveServer, make_user: Any
) -> None:
    owner = make_user()
    admin = get_user_model().objects.create_superuser("root@example.com", "pw-root")
    session = make_session(owner)
    message = make_message(session)
    turn = make_turn(session, status="interrupted")
    rtc = make_rtc(turn, status="pending")
    token = issue_access_token(admin)
    before = _state()

    me = _bearer(token).get("/api/auth/me/")
    assert me.json() == {"id": admin.pk, "email": admin.email}
    posted = _bearer(token).post(f"/api/rtc/{rtc.id}/result", {"success": True, "result": "x"},
                                 content_type="application/json")
    assert (posted.status_code, posted.json()) == (404, {
        "code": "rtc.not_found", "message": f"rtc {rtc.id} not found", "details": None})

    sid, not_found = str(session.id), lambda entity, eid: {
        "code": 404, "message": f"{entity}.not_found: {entity} {eid} not found"}
    with _ws_connect(daphne, token) as (ws, _):
        assert _rpc(ws, 2, "v1.session.list", {})["rpc"]["data"] == {
            "items": [], "next_cursor": ""}
        calls = [
            ("v1.session.get", {"session_id": sid}, ("session", sid)),
            ("v1.message.list", {"session_id": sid}, ("session", sid)),
            ("v1.message.get", {"message_id": str(message.id)}, ("message", message.id)),
            ("v1.turn.list", {"session_id": sid}, ("session", sid)),
            ("v1.turn.get", {"turn_id": str(turn.id)}, ("turn", turn.id)),
            ("v1.rtc.list", {"session_id": sid}, ("session", sid)),
            ("v1.rtc.get", {"rtc_id": str(rtc.id)}, ("rtc", rtc.id)),
            ("v1.session.update", {"session_id": sid, "title": "mine"}, ("session", sid)),
            ("v1.session.close", {"session_id": sid}, ("session", sid)),
            ("v1.rtc.submit_result", {"rtc_id": str(rtc.id), "success": True, "result": "x"},
             ("rtc", rtc.id)),
        ]
        for cid, (method, data, (entity, eid)) in enumerate(calls, start=3):
            assert _rpc(ws, cid, method, data) == {"id": cid, "error": not_found(entity, eid)}, (
                method)
    _assert_nothing_left(daphne, before, admin)


@pytest.mark.parametrize("staff", [False, True], ids=["end-user", "superuser"])
def test_a_bearer_token_never_opens_a_staff_page(make_user: Any, staff: bool) -> None:
    user = (get_user_model().objects.create_superuser("root@example.com", "pw-root")
            if staff else make_user())
    client = _bearer(issue_access_token(user))
    before = _state()
    for path in ("/admin/", "/admin/accounts/user/", f"/admin/accounts/user/{user.pk}/change/"):
        page = client.get(path)
        assert (page.status_code, page["Location"]) == (302, f"/admin/login/?next={path}")
        assert "sessionid" not in page.cookies
    minted = client.post("/api/widget/staff-token", {"device_id": "d1"})
    assert minted.status_code == 302
    assert minted["Location"] == "/admin/login/?next=/api/widget/staff-token"
    assert "access" not in minted.content.decode()
    assert _state() == before
