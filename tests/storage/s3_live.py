"""Helpers of the ``/s3/`` tests: the web process (``python -m rtcagent.serve``, as in
production) over HTTPS or HTTP, temporary credentials from its API, unmodified boto3 clients and
the AWS CLI on a configuration of their own, and raw signed requests for tampering.

HTTPS matters: over TLS boto3 sends uploads by default as ``aws-chunked`` bodies with a
trailing CRC32 (``STREAMING-UNSIGNED-PAYLOAD-TRAILER``, ``Transfer-Encoding: chunked``); over
plain HTTP it signs the payload's SHA-256 instead. Daphne serves TLS from a certificate the test
makes (``cryptography``), which the clients are told to trust.
"""

from __future__ import annotations

import datetime as dt
import http.client
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.livesrv import ROOT, child_env, free_port

BUCKET = "rtc-agent"


@dataclass
class S3Server:
    proc: subprocess.Popen[Any]
    port: int
    log: Path
    scheme: str
    cafile: str | None

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=self.cafile) if self.cafile else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost: (cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def start_s3_server(folder: Path, *, tls: bool = True, **env: str) -> S3Server:
    """The web process on the test database, over HTTPS (default) or HTTP."""
    port = free_port()
    log = folder / f"web-{port}.log"
    if tls:
        cert, key = make_certificate(folder)
        where = ["-e", f"ssl:port={port}:interface=127.0.0.1:privateKey={key}:certKey={cert}"]
    else:
        cert, where = None, ["-b", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen([sys.executable, "-m", "rtcagent.serve", *where], cwd=ROOT,
                            env=child_env(**env), stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError("the web process exited:\n" + log.read_text(errors="replace"))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return S3Server(proc, port, log, "https" if tls else "http",
                            str(cert) if cert else None)
        except OSError as exc:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the web process did not start:\n" + log.read_text()) from exc
            time.sleep(0.1)


# --- the JSON APIs ---------------------------------------------------------------------------


def api_post(server: S3Server, path: str, token: str, body: dict | None = None
             ) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(  # noqa: S310 - the test's own server
        server.url + path, data=data, method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20,  # noqa: S310
                                    context=server.ssl_context()) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def login(user: Any) -> str:
    """An access token of a new login (refresh-token family) of ``user``."""
    from apps.accounts.tokens import issue_token_pair

    return issue_token_pair(user)["access"]


def temporary_credentials(server: S3Server, token: str) -> dict[str, str]:
    status, body = api_post(server, "/api/credentials/temporary", token)
    assert status == 200, body
    return body


def presigned_url(server: S3Server, token: str, operation: str, key: str,
                  expires_in: int | None = None) -> str:
    body: dict[str, Any] = {"operation": operation, "key": key}
    if expires_in is not None:
        body["expires_in"] = expires_in
    status, answer = api_post(server, "/api/presigned-url", token, body)
    assert status == 200, answer
    return answer["url"]


# --- clients ---------------------------------------------------------------------------------


def s3_client(server: S3Server, creds: dict[str, str], **config: Any) -> Any:
    """An unmodified boto3 client on the credentials, path style as documented."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=creds["endpoint_url"], region_name=creds["region"],
        aws_access_key_id=creds["access_key_id"],
        aws_secret_access_key=creds["secret_access_key"],
        aws_session_token=creds["session_token"], verify=server.cafile or True,
        config=Config(s3={"addressing_style": "path"}, **config),
    )


def error_code(exc: Any) -> str:
    return exc.response["Error"]["Code"]


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def code(self) -> str | None:
        """The ``Code`` of an S3 XML error body."""
        from defusedxml import ElementTree

        if not self.body:
            return None
        return ElementTree.fromstring(self.body).findtext("Code")


def raw_request(server: S3Server, method: str, target: str, *, body: bytes = b"",
                headers: dict[str, str] | None = None) -> Reply:
    """One HTTP request with the path and query exactly as given (no client normalising)."""
    host = urlsplit(server.url).netloc
    if server.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, timeout=30, context=server.ssl_context())
    else:
        conn = http.client.HTTPConnection(host, timeout=30)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        sent = {"Host": host, "Content-Length": str(len(body)), **(headers or {})}
        for name, value in sent.items():
            conn.putheader(name, value)
        conn.endheaders(body or None)
        response = conn.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()},
                     response.read())
    finally:
        conn.close()


def signed_request(server: S3Server, creds: dict[str, str], method: str, path: str, *,
                   query: str = "", body: bytes = b"", headers: dict[str, str] | None = None,
                   when: dt.datetime | None = None, payload_hash: str | None = None,
                   ) -> tuple[str, dict[str, str]]:
    """(target, headers) of a request signed by botocore's own S3 signer (header form), to be
    altered by a test before it is sent with ``raw_request``. ``path`` is the encoded path."""
    import hashlib

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = f"{server.url}{path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    request.headers["x-amz-content-sha256"] = payload_hash or hashlib.sha256(body).hexdigest()
    signer = S3SigV4Auth(Credentials(creds["access_key_id"], creds["secret_access_key"],
                                     creds["session_token"]), "s3", "us-east-1")
    if when is None:
        signer.add_auth(request)
    else:  # the client's clock, set back or ahead: botocore reads it through this function
        from unittest import mock

        naive = when.astimezone(dt.UTC).replace(tzinfo=None)
        with mock.patch("botocore.auth.get_current_datetime", lambda *a, **k: naive):
            signer.add_auth(request)
    return path + (f"?{query}" if query else ""), dict(request.headers.items())


# --- the AWS CLI -----------------------------------------------------------------------------


def aws_cli(folder: Path, server: S3Server, creds: dict[str, str], *args: str
            ) -> subprocess.CompletedProcess[str]:
    """``aws <args>`` with a configuration and credentials of its own (path style): never the
    developer's ~/.aws, nor any AWS_* variable of the environment."""
    config, credentials = folder / "aws-config", folder / "aws-credentials"
    config.write_text("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n")
    credentials.write_text(
        "[default]\n"
        f"aws_access_key_id = {creds['access_key_id']}\n"
        f"aws_secret_access_key = {creds['secret_access_key']}\n"
        f"aws_session_token = {creds['session_token']}\n")
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env.update(HOME=str(folder), AWS_CONFIG_FILE=str(config),
               AWS_SHARED_CREDENTIALS_FILE=str(credentials), AWS_EC2_METADATA_DISABLED="true",
               AWS_CA_BUNDLE=server.cafile or "")
    if not server.cafile:
        env.pop("AWS_CA_BUNDLE")
    aws = str(Path(sys.executable).with_name("aws"))
    return subprocess.run([aws, "--endpoint-url", creds["endpoint_url"], *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
