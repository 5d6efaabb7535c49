"""``POST /api/rtc/{rtc_id}/result``: the HTTP twin of ``v1.rtc.submit_result``.

Same body, same semantics (applied once, repeats answer the stored result), so a browser can
deliver a result while its socket is down.
"""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.gateway.registry import RpcContext
from rtcagent.errors import InvalidRequest
from rtcagent.parsers import ToolResultJSONParser

from .rpc import ResultParams, submit_result


class RtcResultView(APIView):
    # JSON only, and ``result`` is checked by the service as for the RPC (see the parser).
    parser_classes = (ToolResultJSONParser,)

    @extend_schema(request=ResultParams, responses={200: dict}, tags=["rtc"])
    def post(self, request: Request, rtc_id: uuid.UUID) -> Response:
        # Errors are RtcErrors, answered {"code", "message", "details"} by rtcagent.api_errors;
        # the widget's outbox drops a result for good on code "invalid_request".
        try:
            body = request.data
        except ParseError as exc:
            raise InvalidRequest(str(exc.detail)) from None
        # As in v1.rtc.submit_result: the tool's output bypasses the serializer (whose JSONField
        # would re-encode it recursively) and goes to the service, which decides what to keep.
        is_object = isinstance(body, dict)
        params = ResultParams(data={k: v for k, v in body.items() if k != "result"}
                              if is_object else body)
        if not params.is_valid():
            raise InvalidRequest("invalid body", details=params.errors)
        device_id = str(request.auth.get("device_id", "")) if request.auth else ""
        ctx = RpcContext(user_id=request.user.id, client="http", device_id=device_id)
        p = {**params.validated_data, "result": body.get("result") if is_object else None}
        answer: dict[str, Any] = submit_result(ctx, rtc_id, p)
        return Response(answer)


__all__ = ["RtcResultView"]
