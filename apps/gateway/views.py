"""Health endpoints: liveness and readiness (database, Redis, object store)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from apps.storage.store import get_store
from rtcagent.redis import get_redis

log = logging.getLogger(__name__)


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


# Each raises when its service does not answer; also run by the system page (apps.ops.probes).
READINESS_PROBES: tuple[tuple[str, Callable[[], object]], ...] = (
    ("database", lambda: connection.cursor().execute("SELECT 1")),
    ("redis", lambda: get_redis().ping()),
    ("objects", lambda: get_store().health()),
)


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, str] = {}
    for name, probe in READINESS_PROBES:
        try:
            probe()
            checks[name] = "ok"
        except Exception as exc:  # reported, never raised: this is the health endpoint
            log.warning("readiness check %s failed: %s", name, type(exc).__name__)
            checks[name] = "unavailable"
    ok = all(v == "ok" for v in checks.values())
    body = {"status": "ok" if ok else "unavailable", **checks}
    return JsonResponse(body, status=200 if ok else 503)
