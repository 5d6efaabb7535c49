"""Can the product reach what it depends on, and how fast: database, Redis, object store (the
probes of ``/readyz``) and the LLM endpoint.

Every probe is timed and never raises: a failure is reported as the exception's class name (never
its text, which may carry a URL with credentials). The LLM probe is an HTTP ``GET <base>/models``
with a 5 s timeout: any HTTP answer proves the endpoint reachable, a 2xx that the key is accepted
too. It is cached for ``LLM_CACHE_SECONDS`` per process, so neither a reloaded system page nor
a scrape every 15 s turns into a stream of requests to the provider.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings

LLM_TIMEOUT = 5.0
LLM_CACHE_SECONDS = 30.0
OPENAI_DEFAULT_BASE = "https://api.openai.com/v1"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    seconds: float
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ms": round(self.seconds * 1000, 1)}


def timed(name: str, probe: Callable[[], object]) -> Check:
    started = time.perf_counter()
    try:
        probe()
    except Exception as exc:
        return Check(name, False, time.perf_counter() - started, type(exc).__name__)
    return Check(name, True, time.perf_counter() - started, "ok")


def services() -> list[Check]:
    """Database, Redis, object store (``/readyz``'s probes), then the LLM endpoint."""
    from apps.gateway.views import READINESS_PROBES

    return [timed(name, probe) for name, probe in READINESS_PROBES] + [llm()]


_llm_lock = threading.Lock()
_llm_cache: tuple[float, Check] | None = None


def llm(*, fresh: bool = False) -> Check:
    global _llm_cache
    with _llm_lock:
        if not fresh and _llm_cache and time.monotonic() - _llm_cache[0] < LLM_CACHE_SECONDS:
            return _llm_cache[1]
        check = _probe_llm()
        _llm_cache = (time.monotonic(), check)
        return check


def _probe_llm() -> Check:
    base = (getattr(settings, "OPENAI_BASE_URL", "") or OPENAI_DEFAULT_BASE).rstrip("/")
    headers = {"Accept": "application/json"}
    if getattr(settings, "OPENAI_API_KEY", ""):
        headers["Authorization"] = f"Bearer {settings.OPENAI_API_KEY}"
    if not base.startswith(("http://", "https://")):
        return Check("llm", False, 0.0, "OPENAI_BASE_URL is not an http(s) URL")
    request = urllib.request.Request(f"{base}/models", headers=headers)  # noqa: S310 - checked
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=LLM_TIMEOUT) as response:  # noqa: S310
            status = response.status
    except urllib.error.HTTPError as exc:  # it answered: reachable
        status = exc.code
    except Exception as exc:  # refused, DNS, TLS, timeout
        reason = getattr(exc, "reason", None)
        name = type(reason).__name__ if isinstance(reason, BaseException) else type(exc).__name__
        return Check("llm", False, time.perf_counter() - started, name)
    seconds = time.perf_counter() - started
    if 200 <= status < 300:
        return Check("llm", True, seconds, f"HTTP {status}")
    hint = " (check OPENAI_API_KEY)" if status in (401, 403) else ""
    return Check("llm", False, seconds, f"HTTP {status}{hint}")
