"""RPC namespace ``v1.rtc.*``: reads, and the browser's status reports and results.

Queries answer ``{items, next_cursor}`` (``next_cursor`` "" at the end) and ``{item}``; every
read is scoped to the caller, another user's ids are ``rtc.not_found`` / ``session.not_found``.
Replies are rendered by their ``@replies`` schema (``apps.gateway.wire``).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway.params import validate
from apps.gateway.registry import RpcContext, rpc
from apps.gateway.wire import action, one, page, replies, success

from . import selectors, services
from .serializers import RtcSerializer

_STATUS_REPLY = action("RtcUpdateStatus", success=success(), rtc=RtcSerializer())
_RESULT_REPLY = action("RtcSubmitResult", success=success(), rtc=RtcSerializer(),
                       duplicate=serializers.BooleanField())


class _ListParams(serializers.Serializer):
    session_id = serializers.UUIDField()
    cursor = serializers.CharField(required=False, allow_blank=True, allow_null=True)
    limit = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class _GetParams(serializers.Serializer):
    rtc_id = serializers.UUIDField()


@rpc("v1.rtc.list")
@replies(page(RtcSerializer, serializers.CharField(allow_blank=True)))
def rtc_list(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """RTCs of one of the caller's sessions, oldest first."""
    p = validate(_ListParams, params)
    found = selectors.rtc_list(
        user_id=ctx.user_id,
        session_id=p["session_id"],
        cursor=p.get("cursor"),
        limit=p.get("limit"),
    )
    return {"items": found.items, "next_cursor": found.next_cursor}


@rpc("v1.rtc.get")
@replies(one(RtcSerializer))
def rtc_get(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """One of the caller's RTCs."""
    p = validate(_GetParams, params)
    return {"item": selectors.rtc_get(user_id=ctx.user_id, rtc_id=p["rtc_id"])}


class _StatusParams(serializers.Serializer):
    rtc_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=["sent", "executing", "rejected"])
    client_id = serializers.CharField(required=False, allow_blank=True, max_length=128, default="")
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class ResultParams(serializers.Serializer):
    """Body of ``v1.rtc.submit_result`` and of ``POST /api/rtc/{rtc_id}/result``."""

    success = serializers.BooleanField()
    result = serializers.JSONField(required=False, allow_null=True, default=None)
    error = serializers.CharField(required=False, allow_blank=True, max_length=10000, default="")
    client_id = serializers.CharField(required=False, allow_blank=True, max_length=128, default="")


class _ResultParams(ResultParams):
    rtc_id = serializers.UUIDField()


@rpc("v1.rtc.update_status")
@replies(_STATUS_REPLY)
def rtc_update_status(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Report ``sent`` / ``executing`` / ``rejected``; statuses never go back, and repeating the
    current one succeeds without an Update: ``{success: true, rtc}``."""
    p = validate(_StatusParams, params)
    change = services.rtc_update_status(
        user_id=ctx.user_id, rtc_id=p["rtc_id"], status=p["status"], client_id=p["client_id"],
        reason=p["reason"], device_id=ctx.device_id,
    )
    return {"result": {"success": True, "rtc": change.rtc}, "updates": change.updates}


def _submit(ctx: RpcContext, rtc_id: Any, p: dict[str, Any]) -> dict[str, Any]:
    change = services.rtc_submit_result(
        user_id=ctx.user_id, rtc_id=rtc_id, success=p["success"], result=p.get("result"),
        error=p.get("error", ""), client_id=p.get("client_id", ""), device_id=ctx.device_id,
    )
    return {
        "result": {"success": True, "rtc": change.rtc, "duplicate": change.duplicate},
        "updates": change.updates,
    }


def submit_result(ctx: RpcContext, rtc_id: Any, p: dict[str, Any]) -> dict[str, Any]:
    """The HTTP twin's reply: apply once, answer ``{success: true, rtc, duplicate}`` with the
    stored RTC, exactly as ``v1.rtc.submit_result``."""
    return _RESULT_REPLY.to_representation(_submit(ctx, rtc_id, p))


@rpc("v1.rtc.submit_result")
@replies(_RESULT_REPLY)
def rtc_submit_result(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Deliver a tool's result: ``{success: true, rtc, duplicate}``; repeats return the stored
    result (``duplicate`` for the same ``client_id``) and never apply a second one."""
    # The result is the tool's output, not the caller's request: one the server cannot keep
    # (too deep, too large) fails the RTC with a message the model sees instead of being refused,
    # so the browser never retries it (see ``services.rtc_submit_result``).
    rest = dict(params) if isinstance(params, dict) else params
    result = rest.pop("result", None) if isinstance(rest, dict) else None
    p = validate(_ResultParams, rest)
    p["result"] = result
    return _submit(ctx, p["rtc_id"], p)
