"""The AWS CLI (``aws s3`` and ``aws s3api``, unmodified, its own configuration) against the live
``/s3/`` over HTTPS with temporary credentials."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.storage.s3_live import (
    BUCKET,
    S3Server,
    aws_cli,
    login,
    start_s3_server,
    temporary_credentials,
)

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def web(django_db_setup: Any, django_db_blocker: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = start_s3_server(tmp_path_factory.mktemp("web-cli"), tls=True)
    yield server
    server.stop()


@pytest.fixture
def cli(web: S3Server, make_user: Any, tmp_path: Any) -> Any:
    creds = temporary_credentials(web, login(make_user()))

    def run(*args: str, ok: bool = True) -> Any:
        done = aws_cli(tmp_path, web, creds, *args)
        if ok:
            assert done.returncode == 0, done.stderr
        return done

    run.prefix = creds["prefix"]  # type: ignore[attr-defined]
    run.url = f"s3://{BUCKET}/{creds['prefix']}"  # type: ignore[attr-defined]
    return run


def test_cp_ls_and_rm(cli, tmp_path) -> None:
    source = tmp_path / "notes + ü.txt"
    source.write_text("written by the AWS CLI\n")
    cli("s3", "cp", str(source), cli.url + "docs/notes + ü.txt")
    cli("s3", "cp", str(source), cli.url + "top.txt")
    listing = cli("s3", "ls", cli.url).stdout
    assert "PRE docs/" in listing and "top.txt" in listing
    recursive = cli("s3", "ls", cli.url, "--recursive").stdout
    assert f"{cli.prefix}docs/notes + ü.txt" in recursive
    back = tmp_path / "back.txt"
    cli("s3", "cp", cli.url + "docs/notes + ü.txt", str(back))
    assert back.read_text() == "written by the AWS CLI\n"
    cli("s3", "cp", cli.url + "top.txt", cli.url + "docs/copy.txt")
    cli("s3", "rm", cli.url + "docs/", "--recursive")
    assert cli("s3", "ls", cli.url, "--recursive").stdout.split()[-1] == f"{cli.prefix}top.txt"


def test_a_large_file_goes_in_parts(cli, tmp_path) -> None:
    data = os.urandom(17 * 1024 * 1024)  # over the CLI's 8 MiB threshold: 3 parts
    (tmp_path / "big.bin").write_bytes(data)
    cli("s3", "cp", str(tmp_path / "big.bin"), cli.url + "big.bin")
    head = json.loads(cli("s3api", "head-object", "--bucket", BUCKET,
                          "--key", cli.prefix + "big.bin").stdout)
    assert head["ContentLength"] == len(data) and head["ETag"].strip('"').endswith("-3")
    cli("s3", "cp", cli.url + "big.bin", str(tmp_path / "back.bin"))
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).digest() == \
        hashlib.sha256(data).digest()


def test_s3api_calls(cli, tmp_path) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    cli("s3api", "put-object", "--bucket", BUCKET, "--key", cli.prefix + "f",
        "--body", str(tmp_path / "f"), "--content-type", "text/plain")
    cli("s3api", "get-object", "--bucket", BUCKET, "--key", cli.prefix + "f",
        "--range", "bytes=3-5", str(tmp_path / "part"))
    assert (tmp_path / "part").read_bytes() == b"345"
    listed = json.loads(cli("s3api", "list-objects-v2", "--bucket", BUCKET,
                            "--prefix", cli.prefix).stdout)
    assert [o["Key"] for o in listed["Contents"]] == [cli.prefix + "f"]
    cli("s3api", "delete-object", "--bucket", BUCKET, "--key", cli.prefix + "f")
    listed = cli("s3api", "list-objects-v2", "--bucket", BUCKET, "--prefix", cli.prefix).stdout
    assert "Contents" not in listed


def test_outside_the_prefix_the_cli_is_refused(cli, make_user, tmp_path) -> None:
    other = f"s3://{BUCKET}/user-{make_user().pk}/"
    (tmp_path / "f").write_text("x")
    for args in (("s3", "ls", other), ("s3", "cp", str(tmp_path / "f"), other + "f"),
                 ("s3", "ls", f"s3://{BUCKET}/")):
        done = cli(*args, ok=False)
        assert done.returncode != 0
        assert "AccessDenied" in done.stderr
