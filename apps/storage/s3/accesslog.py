"""Daphne's access log without credentials: a presigned URL's ``X-Amz-Signature`` and
``X-Amz-Security-Token`` are bearer secrets until it expires, and Daphne writes the request
line, query included. ``install()`` (called by ``rtcagent.serve`` before Daphne starts) makes
its command line use ``RedactingAccessLogGenerator``. Imports neither Django nor the app."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from daphne.access import AccessLogGenerator

SECRET_PARAMETERS = frozenset({"x-amz-signature", "x-amz-security-token"})
REDACTED = "REDACTED"


def redact_path(path: str) -> str:
    """``path`` (with its query) with the values of secret parameters replaced."""
    head, sep, query = path.partition("?")
    if not sep:
        return path
    items = []
    for item in query.split("&"):
        name = item.split("=", 1)[0]
        items.append(f"{name}={REDACTED}" if unquote(name).lower() in SECRET_PARAMETERS
                     else item)
    return f"{head}?{'&'.join(items)}"


class RedactingAccessLogGenerator(AccessLogGenerator):
    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        if isinstance(details.get("path"), str):
            details = {**details, "path": redact_path(details["path"])}
        super().__call__(protocol, action, details)


def install() -> None:
    """Make Daphne's command line log through ``RedactingAccessLogGenerator``."""
    import daphne.cli

    daphne.cli.AccessLogGenerator = RedactingAccessLogGenerator  # type: ignore[misc]
