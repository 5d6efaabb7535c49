"""RPC namespace ``v1.rtc.*`` (reads). ``update_status`` / ``submit_result`` come with the engine.

Queries answer ``{items, next_cursor}`` (``next_cursor`` "" at the end) and ``{item}``; every
read is scoped to the caller, another user's ids are ``rtc.not_found`` / ``session.not_found``.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway.params import validate
from apps.gateway.registry import RpcContext, rpc

from . import selectors
from .serializers import rtc_to_dict


class _ListParams(serializers.Serializer):
    session_id = serializers.UUIDField()
    cursor = serializers.CharField(required=False, allow_blank=True, allow_null=True)
    limit = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class _GetParams(serializers.Serializer):
    rtc_id = serializers.UUIDField()


@rpc("v1.rtc.list")
def rtc_list(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """RTCs of one of the caller's sessions, oldest first."""
    p = validate(_ListParams, params)
    page = selectors.rtc_list(
        user_id=ctx.user_id,
        session_id=p["session_id"],
        cursor=p.get("cursor"),
        limit=p.get("limit"),
    )
    return {"items": [rtc_to_dict(r) for r in page.items], "next_cursor": page.next_cursor}


@rpc("v1.rtc.get")
def rtc_get(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """One of the caller's RTCs."""
    p = validate(_GetParams, params)
    return {"item": rtc_to_dict(selectors.rtc_get(user_id=ctx.user_id, rtc_id=p["rtc_id"]))}
