"""``make run``: migrate, make sure a development admin exists, then run web + worker.

Both children share this folder's embedded Valkey (started once, see ``rtcagent.embedded``)
unless ``REDIS_URL`` is set. While they run, a supervisor thread restarts that Valkey on the same
port if it dies, so the children's clients reconnect by themselves. Ctrl-C stops the children and,
if it was ours, the Valkey server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rtcagent.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)
    call_command("ensure_dev_admin")
    port = os.environ.get("PORT", "8000")
    env = dict(os.environ, REDIS_URL=settings.REDIS_URL)
    py = sys.executable
    supervisor = None
    if settings.EMBEDDED_VALKEY:
        from rtcagent.embedded import ValkeySupervisor

        supervisor = ValkeySupervisor(settings.VAR_DIR).start()
    children = [
        subprocess.Popen(  # noqa: S603 - fixed commands
            [py, "-m", "rtcagent.serve", "-b", "127.0.0.1", "-p", port],
            cwd=ROOT, env=env,
        ),
        subprocess.Popen([py, "manage.py", "rtc_worker"], cwd=ROOT, env=env),  # noqa: S603
    ]
    print(f"\nrtcagent is running: http://127.0.0.1:{port}/  (admin: /admin/, Ctrl-C stops)\n")
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0
    while not stopping:
        for child in children:
            if child.poll() is not None:
                print(f"{child.args[2]} exited with {child.returncode}; stopping", file=sys.stderr)
                code, stopping = child.returncode or 1, True
        time.sleep(0.2)
    if supervisor is not None:
        supervisor.stop()
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
    if settings.EMBEDDED_VALKEY:
        from rtcagent.embedded import stop_valkey

        stop_valkey(settings.VAR_DIR)
    return code


if __name__ == "__main__":
    sys.exit(main())
