"""``POST /api/rtc/{rtc_id}/result``: the HTTP twin of ``v1.rtc.submit_result``.

Same body, same semantics (applied once, repeats answer the stored result), so a browser can
deliver a result while its socket is down.
"""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.gateway.registry import RpcContext
from rtcagent.errors import RtcError

from .rpc import ResultParams, submit_result


class RtcResultView(APIView):
    @extend_schema(request=ResultParams, responses={200: dict}, tags=["rtc"])
    def post(self, request: Request, rtc_id: uuid.UUID) -> Response:
        params = ResultParams(data=request.data)
        if not params.is_valid():
            return Response({"code": "invalid_request", "message": "invalid body",
                             "details": params.errors}, status=status.HTTP_400_BAD_REQUEST)
        device_id = str(request.auth.get("device_id", "")) if request.auth else ""
        ctx = RpcContext(user_id=request.user.id, client="http", device_id=device_id)
        try:
            body: dict[str, Any] = submit_result(ctx, rtc_id, dict(params.validated_data))
        except RtcError as exc:
            # Application codes are HTTP statuses (rtcagent.errors), 104 aside.
            code = exc.code if 400 <= exc.code < 600 else status.HTTP_400_BAD_REQUEST
            return Response({"code": exc.slug, "message": exc.message, "details": exc.details},
                            status=code)
        return Response(body)


__all__ = ["RtcResultView"]
