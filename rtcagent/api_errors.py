"""Errors of the HTTP API, mapped to JSON in one place (``REST_FRAMEWORK["EXCEPTION_HANDLER"]``).

* DRF's own exceptions (validation, parse, authentication, throttling, 404, 405) keep DRF's
  bodies: ``{"detail": ...}`` (simplejwt adds ``code``).
* ``rtcagent.errors.RtcError`` answers its code as the HTTP status (104 aside, which is 400) with
  ``{"code": <slug>, "message", "details"}``, the body the RTC result endpoint documents.
* Anything else is logged with its traceback and answered 500
  ``{"detail": "A server error occurred.", "code": "server_error"}``: never HTML, never the
  exception's text, in debug too (docs/auth.md promises JSON errors on ``/api/``).
"""

from __future__ import annotations

import logging
from typing import Any

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from rtcagent.errors import RtcError

log = logging.getLogger(__name__)

SERVER_ERROR = {"detail": "A server error occurred.", "code": "server_error"}


def rtc_error_response(exc: RtcError) -> Response:
    code = exc.code if 400 <= exc.code < 600 else status.HTTP_400_BAD_REQUEST
    return Response({"code": exc.slug, "message": exc.message, "details": exc.details},
                    status=code)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    response = drf_exception_handler(exc, context)
    if response is not None:
        return response
    set_rollback()
    if isinstance(exc, RtcError):
        return rtc_error_response(exc)
    view = context.get("view")
    log.error("unhandled error in %s", type(view).__name__ if view else "an API view",
              exc_info=exc)
    return Response(SERVER_ERROR, status=status.HTTP_500_INTERNAL_SERVER_ERROR)


def server_error(request: Any) -> Any:
    """``handler500``: a crash outside DRF (plain Django views under ``/api/``) answers the same
    JSON body as DRF views do; other paths keep Django's HTML page."""
    from django.http import JsonResponse
    from django.views.defaults import server_error as html_server_error

    if request.path.startswith("/api/"):
        return JsonResponse(SERVER_ERROR, status=500)
    return html_server_error(request)
