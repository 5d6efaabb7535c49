"""The collector settings of the long-running processes (``rtcagent.gctune``): the setting read,
a bad one refused with a clear message, and the web and worker processes really tuned."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from rtcagent import gctune
from tests.livesrv import ROOT, child_env, start_daphne


def test_the_default_and_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RTC_GC_THRESHOLD", raising=False)
    assert gctune.threshold() == gctune.DEFAULT_THRESHOLD
    monkeypatch.setenv("RTC_GC_THRESHOLD", " 2000, 5,7 ")
    assert gctune.threshold() == (2000, 5, 7)
    monkeypatch.setenv("RTC_GC_THRESHOLD", "OFF")
    assert gctune.threshold() is None


@pytest.mark.parametrize("raw", ["1000", "1000,10", "a,b,c", "1000,0,10", "-1,10,10", "1,2,3,4"])
def test_a_bad_setting_is_refused_with_what_is_expected(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("RTC_GC_THRESHOLD", raw)
    with pytest.raises(ImproperlyConfigured,
                       match=r"RTC_GC_THRESHOLD=.*(positive integers|at least 1)"):
        gctune.threshold()


def _tuned_in_a_fresh_process(value: str) -> str:
    code = ("import gc, logging; logging.basicConfig(level=logging.INFO); "
            "from rtcagent import gctune; gctune.tune('probe'); "
            "print(gc.get_freeze_count() > 0, gc.get_threshold())")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env=child_env(RTC_GC_THRESHOLD=value), timeout=60, check=True)
    return done.stdout.strip()


def test_tune_freezes_and_sets_the_thresholds_or_leaves_cpython_alone() -> None:
    assert _tuned_in_a_fresh_process("3000,4,5") == "True (3000, 4, 5)"
    assert _tuned_in_a_fresh_process("off") == "False (700, 10, 10)"


@pytest.mark.django_db(transaction=True)  # the server's database: the test run's
def test_the_web_process_is_tuned_before_it_serves(tmp_path: Path) -> None:
    server = start_daphne(tmp_path, RTC_GC_THRESHOLD="12000,10,10")
    try:
        with urllib.request.urlopen(f"{server.http_url}/admin/login/", timeout=10) as reply:  # noqa: S310
            assert reply.status == 200  # it serves
        assert "web: " in server.output()
        assert "objects frozen at start, collector thresholds 12000,10,10" in server.output()
    finally:
        server.stop()


def test_processes_refuse_a_bad_setting_at_start(tmp_path: Path) -> None:
    env = child_env(RTC_GC_THRESHOLD="lots")
    for argv in ([sys.executable, "-m", "rtcagent.serve", "-p", "0"],
                 [sys.executable, "manage.py", "rtc_worker"]):
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env,
                              timeout=60)
        assert done.returncode != 0, argv
        assert "RTC_GC_THRESHOLD='lots': three positive integers" in done.stderr, done.stderr
