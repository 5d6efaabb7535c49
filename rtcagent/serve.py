"""The ``web`` process: Daphne with WebSocket limits derived from the gateway's own.

``python -m rtcagent.serve [-b HOST] [-p PORT] [daphne options]``

Daphne (autobahn) drops a message over its own size limit with a bare close, before the gateway
sees it; its default (1 MiB) is below the gateway's ``MAX_FRAME_BYTES``. So Daphne is started
with twice the gateway's limit, and at least 64 MiB, because autobahn applies the same limit to
the messages it *sends* (an RPC page or a recovery can be larger than any frame a client may
send). Every frame up to that reaches the gateway, which refuses the ones over its limit with the
documented ``3501 frame too large``; only larger ones are cut by Daphne (close 1009), after it
buffered them (so at most 64 MiB per connection). One place decides the flags for the Procfile,
``make run`` and the tests, so they never drift apart.
"""

from __future__ import annotations

import os
import sys


def daphne_args(argv: list[str]) -> list[str]:
    """Daphne's command line: the caller's options, the size limits, the ASGI application."""
    from django.conf import settings  # noqa: F401 - configured from DJANGO_SETTINGS_MODULE

    from rtcagent.conf import rtc_setting

    # Autobahn applies the same limit to messages it sends: leave room for the largest reply
    # (a recovery is capped at RECOVERY_MAX_BYTES, a result at MAX_RESULT_BYTES).
    limit = max(2 * int(rtc_setting("MAX_FRAME_BYTES")), 64 * 1024 * 1024)
    return [
        *argv,
        "--websocket-max-message-size", str(limit),
        "--websocket-max-frame-size", str(limit),
        "rtcagent.asgi:application",
    ]


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rtcagent.settings")
    from daphne.cli import CommandLineInterface

    from apps.storage.s3.accesslog import install

    install()  # presigned URLs' signatures and tokens never reach the access log
    CommandLineInterface().run(daphne_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
