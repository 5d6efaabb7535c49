"""The operator console's own pages (system, usage; staff only, inside the admin) and /metrics.

Views adapt: they call the probes and selectors and render; numbers are read, never written.
"""

from __future__ import annotations

import hmac
import logging
import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET

from apps.gateway import presence

from . import charts, metrics, probes, processes, selectors

log = logging.getLogger(__name__)

USAGE_WINDOWS = (7, 30, 90)


def _when(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, tz=UTC) if ts else None


def _system_context() -> dict[str, Any]:
    checks = probes.services()
    try:
        state: dict[str, Any] | None = selectors.system_state()
        problem = ""
    except Exception as exc:  # Redis or the database away: the checks above say which
        log.warning("system state unavailable: %s", type(exc).__name__, exc_info=True)
        state, problem = None, type(exc).__name__
    now = time.time()
    if state is not None:
        for proc in state["workers"] + state["webs"]:
            proc["started_at"] = _when(proc.get("started"))
            proc["age"] = round(now - proc.get("reported_at", now), 1)
    return {"checks": [c.as_dict() for c in checks], "state": state, "problem": problem}


@require_GET
def system_view(request: HttpRequest) -> TemplateResponse:
    context = {**admin.site.each_context(request), "title": "System",
               **_system_context(), "ttl": processes.TTL}
    return TemplateResponse(request, "admin/ops/system.html", context)


@require_GET
def usage_view(request: HttpRequest) -> TemplateResponse:
    try:
        days = int(request.GET.get("days", "30"))
    except ValueError:
        days = 30
    days = days if days in USAGE_WINDOWS else 30
    user = None
    if request.GET.get("user"):
        from django.contrib.auth import get_user_model

        user = get_object_or_404(get_user_model(), pk=request.GET["user"])
    per_day = selectors.usage_by_day(days=days, user_id=user.pk if user else None)
    costs = [d["cost"] for d in per_day if d["cost"] is not None]
    model = selectors.current_model()
    context = {
        **admin.site.each_context(request),
        "title": f"Usage of {user.email}" if user else "Usage",
        "days": days,
        "windows": USAGE_WINDOWS,
        "chosen_user": user,
        "per_user": [] if user else selectors.usage_by_user(days=days),
        "per_day": per_day,
        "chart": charts.tokens_by_day(per_day),
        "model": model,
        "price": selectors.price_of(model),
        "unpriced": selectors.unpriced_models(days=days, user_id=user.pk if user else None),
        "totals": {key: sum(d[key] for d in per_day)
                   for key in ("turns", "calls", "input", "output", "cached")},
        "total_cost": sum(costs) if costs else None,
    }
    return TemplateResponse(request, "admin/ops/usage.html", context)


system = admin.site.admin_view(system_view)
usage = admin.site.admin_view(usage_view)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format; ``Authorization: Bearer <RTC_METRICS_TOKEN>``. No token
    configured: 404, as if there were no such page."""
    token = getattr(settings, "RTC_METRICS_TOKEN", "")
    if not token:
        raise Http404
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                            token.encode()):
        response = HttpResponse("unauthorized\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    checks = probes.services()
    try:
        state: dict[str, Any] | None = selectors.system_state()
    except Exception:
        log.warning("metrics: system state unavailable", exc_info=True)
        state = None
    # Every live web process's report; this process's own taken now, not its last one.
    webs = {w["id"]: w for w in (state or {}).get("webs", [])}
    own = presence.reporter().process_id
    webs[own] = {**webs.get(own, {}), "id": own, "sockets": presence.sockets(),
                 "metrics": metrics.snapshot()}
    if state is not None:
        state["webs"] = list(webs.values())
    families = [*metrics.system_families(checks, state), *metrics.process_families(webs.values())]
    return HttpResponse(metrics.exposition(families), content_type=metrics.CONTENT_TYPE)
