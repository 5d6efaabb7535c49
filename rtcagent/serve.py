"""The ``web`` process: an ASGI server with WebSocket limits derived from the gateway's own.

``python -m rtcagent.serve [-b HOST] [-p PORT] [-e ssl:port=P:interface=H:privateKey=K:certKey=C]``

The server is ``RTC_WEB_SERVER``: ``uvicorn`` (the default: uvloop, httptools and the sans-I/O
``websockets`` protocol) or ``daphne`` (Twisted and autobahn, the server before). Uvicorn spends
about half of Daphne's CPU on an idle socket's ping and pong, the web process's floor at 10,000
sockets (docs/performance.md). Both get the same contract, decided here once for the Procfile,
``make run`` and the tests:

* **Frame sizes.** A server that drops a message over its own size limit does so with a bare
  close, before the gateway sees it. So the server's limit is twice the gateway's
  ``MAX_FRAME_BYTES`` and at least 64 MiB: every frame up to that reaches the gateway, which
  refuses the ones over its limit with the documented ``3501 frame too large``; only larger ones
  are cut by the server: uvicorn closes with 1009 (a single frame from its header, before reading
  it; a fragmented message once its fragments pass the limit, so at most 64 MiB is buffered per
  connection), Daphne drops the connection (1006).
  Autobahn also applies the limit to what it *sends* (a recovery or an RPC page can be larger
  than any frame a client may send), hence the 64 MiB floor; uvicorn bounds incoming ones only.
* **No permessage-deflate**, no server-side WebSocket ping (the gateway's Centrifuge ping is the
  keepalive), no proxy headers (``RTC_NUM_PROXIES`` decides what ``X-Forwarded-For`` means).
* **Sends never wait for a slow reader.** Daphne buffers whatever a client does not read; the
  gateway bounds that itself (3008 past ``SLOW_CLIENT_BYTES``, ``apps.gateway.consumer``). Uvicorn
  would instead suspend every send to a socket whose buffer is full, and the live bus forwards
  one frame to every local socket in turn, so one stalled client would stall the others:
  ``GatewayWebSocket`` keeps Daphne's behaviour, and aborts a connection whose closing handshake
  does not finish (a client that reads nothing never sees the close frame).
* **The access log** never shows presigned URLs' signatures and tokens
  (``apps.storage.s3.accesslog``).
* **The garbage collector**: what the application loaded is frozen and young passes are rarer
  (``rtcagent.gctune``).
* **Graceful shutdown**: on SIGTERM the server stops accepting, closes the WebSockets (1012: the
  clients reconnect elsewhere and recover) and gives requests in flight ``SHUTDOWN_GRACE``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

SHUTDOWN_GRACE = 10  # seconds for requests in flight after SIGTERM


def frame_limit() -> int:
    """The server's WebSocket message size limit (see the module docstring)."""
    from rtcagent.conf import rtc_setting

    return max(2 * int(rtc_setting("MAX_FRAME_BYTES")), 64 * 1024 * 1024)


def server_name() -> str:
    """``RTC_WEB_SERVER`` (checked by the settings)."""
    from django.conf import settings

    return str(settings.RTC_WEB_SERVER)


# --- Daphne ------------------------------------------------------------------------------------


def daphne_args(argv: list[str]) -> list[str]:
    """Daphne's command line: the caller's options, the size limits, the ASGI application."""
    limit = frame_limit()
    return [
        *argv,
        "--websocket-max-message-size", str(limit),
        "--websocket-max-frame-size", str(limit),
        "rtcagent.asgi:application",
    ]


def run_daphne(argv: list[str]) -> None:
    from daphne.cli import CommandLineInterface

    import rtcagent.asgi  # noqa: F401  loaded before Daphne imports it by name: frozen with the rest
    from apps.storage.s3.accesslog import install
    from rtcagent import gctune

    install()  # presigned URLs' signatures and tokens never reach the access log
    gctune.tune("web")
    CommandLineInterface().run(daphne_args(argv))


# --- uvicorn -----------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    """uvicorn's share of Daphne's command line, as the Procfile, ``make run`` and the tests give
    it: ``-b``/``-p``, or one Twisted-style endpoint ``-e`` (``tcp:port=P:interface=H`` or
    ``ssl:port=P:interface=H:privateKey=K:certKey=C``)."""
    parser = argparse.ArgumentParser(prog="python -m rtcagent.serve")
    parser.add_argument("-b", "--bind", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=8000)
    parser.add_argument("-e", "--endpoint", default="")
    args = parser.parse_args(argv)
    args.ssl_keyfile = args.ssl_certfile = None
    if args.endpoint:
        kind, _, rest = args.endpoint.partition(":")
        fields = dict(part.split("=", 1) for part in rest.split(":") if "=" in part)
        if kind not in ("tcp", "ssl") or "port" not in fields:
            parser.error(f"unsupported endpoint {args.endpoint!r}")
        args.port = int(fields["port"])
        args.bind = fields.get("interface", args.bind)
        if kind == "ssl":
            args.ssl_keyfile, args.ssl_certfile = fields["privateKey"], fields["certKey"]
    return args


class RedactingFilter(logging.Filter):
    """Redacts secret query parameters from a log record's string arguments (the request path
    of uvicorn's access log and of its WebSocket lines), and drops the ``websockets`` library's
    own "connection open" and "connection closed" lines (a second line per socket after
    uvicorn's ``[accepted]``, thousands in a reconnect storm)."""

    CHATTER = frozenset({"connection open", "connection closed"})

    def filter(self, record: logging.LogRecord) -> bool:
        from apps.storage.s3.accesslog import redact_path

        if record.msg in self.CHATTER and not record.args:
            return False
        if isinstance(record.args, tuple) and any(
            isinstance(a, str) and "?" in a for a in record.args
        ):
            record.args = tuple(
                redact_path(a) if isinstance(a, str) else a for a in record.args
            )
        return True


def gateway_websocket() -> type:
    """uvicorn's sans-I/O WebSocket protocol whose sends never wait (see the module docstring)."""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    class GatewayWebSocket(WebSocketsSansIOProtocol):
        def pause_writing(self) -> None:
            """Keep accepting sends: the gateway bounds what a client leaves unread."""

        def resume_writing(self) -> None:
            pass

        async def send(self, message: Any) -> None:
            await super().send(message)
            if message["type"] == "websocket.close" and self.close_timer is not None:
                # A plain close() waits for the buffer to drain, forever if nobody reads it.
                self.close_timer.cancel()
                self.close_timer = self.loop.call_later(self.close_timeout, self.transport.abort)

    return GatewayWebSocket


def run_uvicorn(argv: list[str]) -> None:
    import uvicorn

    from rtcagent import gctune
    from rtcagent.asgi import application

    args = parse_args(argv)
    limit = frame_limit()
    config = uvicorn.Config(
        application,
        host=args.bind,
        port=args.port,
        ssl_keyfile=args.ssl_keyfile,
        ssl_certfile=args.ssl_certfile,
        loop="uvloop",
        http="httptools",
        ws=gateway_websocket(),
        ws_max_size=limit,
        ws_ping_interval=None,
        ws_ping_timeout=None,
        ws_per_message_deflate=False,
        lifespan="off",
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE,
        log_config=None,  # Django's LOGGING (timestamps, levels) formats uvicorn's lines too
    )
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).addFilter(RedactingFilter())
    gctune.tune("web")
    uvicorn.Server(config).run()


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rtcagent.settings")
    args = sys.argv[1:] if argv is None else argv
    if server_name() == "daphne":
        run_daphne(args)
    else:
        run_uvicorn(args)


if __name__ == "__main__":
    main()
