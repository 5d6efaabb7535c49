"""The rate limit of ``/oauth2/token`` and ``/oauth2/revoke`` (the ``oauth`` rate).

A request is counted against the client it names (HTTP Basic or form ``client_id``), else
against its address (the peer, or the client's entry of X-Forwarded-For behind
``RTC_NUM_PROXIES`` proxies, as the login throttle). The client is only named here, not
authenticated: a stranger naming someone else's client spends that client's budget, so the
rate is per client and generous (``RTC_OAUTH_RATE``, default ``600/min``). Over it the answer
is 429 ``{"error": "slow_down"}`` with ``Retry-After``.
"""

from __future__ import annotations

import math
from typing import Any

from rest_framework.exceptions import Throttled
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from .clients import _basic_credentials
from .oauth import InvalidClient

SCOPE = "oauth"
_FORM = "application/x-www-form-urlencoded"


def _named_client(request: Request) -> str:
    authorization = request.headers.get("Authorization", "")
    if authorization:
        try:
            basic = _basic_credentials(authorization)
        except InvalidClient:  # a malformed header: the view answers it (401 invalid_client)
            basic = None
        if basic and basic[0]:
            return basic[0]
    if request.content_type.split(";")[0].strip().lower() != _FORM:
        return ""  # leave a wrong body to the view (its own 400/415)
    try:
        client_id = request.data.get("client_id")
    except Exception:  # an unparsable body: the view answers it
        return ""
    return client_id[:64] if isinstance(client_id, str) else ""


class OAuthRateThrottle(SimpleRateThrottle):
    scope = SCOPE

    def get_rate(self) -> str | None:
        # Read at request time, so a settings override (tests, RTC_OAUTH_RATE) applies.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request: Request, view: Any) -> str:
        client_id = _named_client(request)
        ident = f"client:{client_id}" if client_id else f"addr:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class OAuthThrottled:
    """View mixin: the ``oauth`` throttle, answered in OAuth's error format."""

    throttle_classes = (OAuthRateThrottle,)

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, Throttled):
            wait = max(1, math.ceil(exc.wait or 1))
            return Response(
                {"error": "slow_down", "error_description": f"too many requests; retry in {wait}s"},
                status=429,
                headers={"Retry-After": str(wait), "Cache-Control": "no-store"},
            )
        return super().handle_exception(exc)  # type: ignore[misc]
