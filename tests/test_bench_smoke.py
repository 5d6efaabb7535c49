"""The benchmark harness (``make bench``, docs/performance.md) in its smoke mode: every case runs
once, tiny, against the real stack on the test database, and the report is complete.

Only that the harness works is checked; no figure is compared with its target (benchmarks are
not tests, and this machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from bench.cases import CASES
from tests.livesrv import ROOT, child_env

pytestmark = pytest.mark.django_db(transaction=True)


def test_smoke_run_reports_every_case(tmp_path: Path) -> None:
    env = child_env(BENCH_ALLOW_SQLITE="1")
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    report = json.loads((tmp_path / "smoke.json").read_text())
    assert report["mode"] == "smoke"
    assert set(report["cases"]) == set(CASES)
    for name, case in report["cases"].items():
        assert "error" not in case, (name, case)
        assert case["ratios"], name
        for r in case["ratios"]:
            assert isinstance(r["value"], int | float), (name, r)  # NaN: not measurable here
            assert r["target"]
    table = (tmp_path / "smoke.md").read_text()
    assert table.count("\n| ") >= len(CASES) + 1  # header and at least one row per case
    assert "target" in run.stdout  # every ratio is printed with its target
    if connection.vendor == "postgresql":  # the durable floor ran beside the relay...
        names = {r["name"] for case in report["cases"].values() for r in case["ratios"]}
        assert {f"tool {p} p50 against the durable floor (informational)"
                for p in ("pause", "resume")} <= names
        assert "time to first chunk p50 against the durable floor (informational)" in names
        with connection.cursor() as cursor:  # ...and its tables are gone
            cursor.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'bench_floor'")
            assert cursor.fetchone()[0] == 0


def test_unknown_case_is_refused() -> None:
    run = subprocess.run([sys.executable, "-m", "bench", "--only", "nope"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2
    assert "unknown case(s): nope" in run.stderr
