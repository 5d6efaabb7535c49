"""A real second identity provider for the token-exchange tests: its own RSA/EC/Ed25519 keys and
a JWKS served over HTTP by a small threaded server that counts every request it gets.

``rotate()`` swaps the signing key (the old one stays published until ``retire()``), ``down()``
makes the JWKS answer 503, and ``requests`` lists every path fetched, so a test can assert that
a ``jku``/``x5u`` URL was never contacted.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from apps.accounts.keys import JwtKey


def new_key(algorithm: str) -> JwtKey:
    if algorithm == "RS256":
        return JwtKey.from_key(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    if algorithm == "ES256":
        return JwtKey.from_key(ec.generate_private_key(ec.SECP256R1()))
    return JwtKey.from_key(ed25519.Ed25519PrivateKey.generate())


class TestIssuer:
    """An issuer at ``http://127.0.0.1:<port>`` with its JWKS at ``/jwks.json``."""

    __test__ = False

    def __init__(self, algorithm: str = "RS256", *, max_age: int = 300) -> None:
        self.keys: list[JwtKey] = [new_key(algorithm)]
        self.max_age = max_age
        self.available = True
        self.requests: list[str] = []
        self._lock = threading.Lock()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with issuer._lock:
                    issuer.requests.append(self.path)
                if self.path != "/jwks.json" or not issuer.available:
                    self.send_response(503 if self.path == "/jwks.json" else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"keys": [k.jwk() for k in issuer.keys]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Cache-Control", f"public, max-age={issuer.max_age}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def jwks_uri(self) -> str:
        return self.url + "/jwks.json"

    @property
    def signing(self) -> JwtKey:
        return self.keys[-1]

    def jwks_fetches(self) -> int:
        with self._lock:
            return self.requests.count("/jwks.json")

    def rotate(self, algorithm: str | None = None) -> JwtKey:
        """A new signing key, published next to the old one (the overlap)."""
        self.keys.append(new_key(algorithm or self.signing.algorithm))
        return self.signing

    def retire(self) -> None:
        """Stop publishing every key but the current one."""
        self.keys = [self.signing]

    def config(self, **changes: Any) -> dict[str, Any]:
        base = {"issuer": self.url, "jwks_uri": self.jwks_uri, "audiences": ["rtcagent"]}
        base.update(changes)
        return base

    def claims(self, **changes: Any) -> dict[str, Any]:
        now = int(time.time())
        base: dict[str, Any] = {
            "iss": self.url, "aud": "rtcagent", "sub": "user-1", "email": "ann@site.example",
            "name": "Ann Site", "device_id": "dev-1", "iat": now, "exp": now + 300,
            "jti": uuid.uuid4().hex,
        }
        base.update(changes)
        return {k: v for k, v in base.items() if v is not None}

    def token(self, *, key: JwtKey | None = None, headers: dict[str, Any] | None = None,
              **changes: Any) -> str:
        key = key or self.signing
        return jwt.encode(self.claims(**changes), key.private_key, algorithm=key.algorithm,
                          headers={"kid": key.kid, **(headers or {})})

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
