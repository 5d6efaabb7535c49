"""HTTP latency histogram (``rtc_http_request_duration_seconds``), first in the middleware chain.

Labelled by the matched route *pattern* (``api/auth/token/``, ``admin/<app>/...``), never the
raw path, so label values stay few; requests no route matched (static files answered by
WhiteNoise, 404s) share ``unmatched``. The first request also starts this process's report
(``apps.gateway.presence``), so a web process that only serves HTTP shows up too.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from apps.gateway import presence

from .metrics import observe_http


def _route(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    return str(match.route) if match is not None and match.route else "unmatched"


class RequestLatencyMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        presence.ensure_reporting()
        started = time.perf_counter()
        response = self.get_response(request)
        self._observe(request, response, started)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        presence.ensure_reporting()
        started = time.perf_counter()
        get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = self.get_response
        response = await get_response(request)
        self._observe(request, response, started)
        return response

    @staticmethod
    def _observe(request: HttpRequest, response: HttpResponseBase, started: float) -> None:
        observe_http(request.method or "", _route(request), response.status_code,
                     time.perf_counter() - started)
