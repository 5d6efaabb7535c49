"""``rtcagent.serve``: the web process's command line, size limit and access-log redaction (the
servers themselves run in tests/gateway, tests/storage and the browser tests)."""

from __future__ import annotations

import logging

import pytest

from rtcagent import serve


def test_bind_and_port_options() -> None:
    args = serve.parse_args(["-b", "10.0.0.5", "-p", "8123"])
    assert (args.bind, args.port, args.ssl_keyfile, args.ssl_certfile) == (
        "10.0.0.5", 8123, None, None)


def test_twisted_style_endpoints_are_understood() -> None:
    endpoint = "ssl:port=8443:interface=127.0.0.1:privateKey=/k.pem:certKey=/c.pem"
    args = serve.parse_args(["-e", endpoint])
    assert (args.bind, args.port, args.ssl_keyfile, args.ssl_certfile) == (
        "127.0.0.1", 8443, "/k.pem", "/c.pem")
    args = serve.parse_args(["-e", "tcp:port=9000"])
    assert (args.bind, args.port, args.ssl_keyfile) == ("127.0.0.1", 9000, None)
    with pytest.raises(SystemExit):
        serve.parse_args(["-e", "unix:address=/tmp/s"])


def test_the_frame_limit_leaves_room_for_the_gateway_refusal(settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_FRAME_BYTES": 4 * 1024 * 1024}
    assert serve.frame_limit() == 64 * 1024 * 1024
    settings.RTCAGENT = {**settings.RTCAGENT, "MAX_FRAME_BYTES": 48 * 1024 * 1024}
    assert serve.frame_limit() == 96 * 1024 * 1024


def test_access_log_lines_lose_presigned_secrets() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/s3/b/k?X-Amz-Signature=abc&X-Amz-Security-Token=t&a=1",
         "1.1", 200), None)
    assert serve.RedactingFilter().filter(record)
    assert record.getMessage() == (
        '127.0.0.1:5000 - "GET /s3/b/k?X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED'
        '&a=1 HTTP/1.1" 200')
    chatter = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, "connection open",
                                None, None)
    assert not serve.RedactingFilter().filter(chatter)
