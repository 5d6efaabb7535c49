"""A real S3-protocol server for tests: moto's server mode (``moto[server]``) in a subprocess.

Not a mock: boto3, the S3 backend and the ``/s3/`` endpoint's children all talk HTTP to it, as
to MinIO or AWS. ``start_moto`` waits until it answers; ``stop`` ends it (and only it).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.livesrv import free_port, spawn_listening

ACCESS_KEY_ID = "moto-access-key"
SECRET_ACCESS_KEY = "moto-secret-key"  # moto accepts any signature; boto3 still signs
REGION = "us-east-1"


@dataclass
class MotoServer:
    proc: subprocess.Popen[Any]
    port: int
    log: Path
    _buckets: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def new_bucket(self) -> str:
        """Create an empty bucket with a name not used before in this server's life."""
        name = f"rtc-test-{next(self._buckets)}"
        # CreateBucket in us-east-1 is a bare PUT; moto does not check signatures.
        request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1
            f"{self.endpoint_url}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            assert response.status == 200, response.status
        return name

    def store_config(self, bucket: str) -> dict[str, Any]:
        """An ``RTC_OBJECT_STORE`` for the S3 backend on ``bucket``."""
        return {
            "BACKEND": "s3",
            "BUCKET": bucket,
            "ENDPOINT_URL": self.endpoint_url,
            "REGION": REGION,
            "ACCESS_KEY_ID": ACCESS_KEY_ID,
            "SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "ADDRESSING_STYLE": "path",
            "ROOT": "",
        }

    def env(self, bucket: str) -> dict[str, str]:
        """Environment variables that make a child process (Daphne, a worker) use ``bucket``."""
        return {
            "AWS_STORAGE_BUCKET_NAME": bucket,
            "AWS_S3_ENDPOINT_URL": self.endpoint_url,
            "AWS_S3_REGION_NAME": REGION,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_S3_ADDRESSING_STYLE": "path",
        }

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def start_moto(log_dir: Path) -> MotoServer:
    port = free_port()
    log = log_dir / f"moto-{port}.log"
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    return MotoServer(spawn_listening("moto server", argv, port, log), port, log)
