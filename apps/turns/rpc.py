"""RPC namespace ``v1.turn.*`` (reads). ``v1.turn.stop`` belongs with the engine.

Queries answer ``{items, next_cursor}`` (``next_cursor`` "" at the end) and ``{item}``; every
read is scoped to the caller, another user's ids are ``turn.not_found`` / ``session.not_found``.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway.params import validate
from apps.gateway.registry import RpcContext, rpc

from . import selectors, services
from .serializers import turn_to_dict


class _ListParams(serializers.Serializer):
    session_id = serializers.UUIDField()
    cursor = serializers.CharField(required=False, allow_blank=True, allow_null=True)
    limit = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class _GetParams(serializers.Serializer):
    turn_id = serializers.UUIDField()


@rpc("v1.turn.list")
def turn_list(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Turns of one of the caller's sessions, oldest first."""
    p = validate(_ListParams, params)
    page = selectors.turn_list(
        user_id=ctx.user_id,
        session_id=p["session_id"],
        cursor=p.get("cursor"),
        limit=p.get("limit"),
    )
    return {"items": [turn_to_dict(t) for t in page.items], "next_cursor": page.next_cursor}


@rpc("v1.turn.get")
def turn_get(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """One of the caller's turns."""
    p = validate(_GetParams, params)
    return {"item": turn_to_dict(selectors.turn_get(user_id=ctx.user_id, turn_id=p["turn_id"]))}


class _StopParams(serializers.Serializer):
    session_id = serializers.UUIDField()
    client_id = serializers.CharField(required=False, allow_blank=True, max_length=128)


@rpc("v1.turn.stop")
def turn_stop(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Stop the session's open turn: ``{turn_id, status}`` (``turn_id`` "" when none was open).

    ``updates`` is always empty: the turn's own Updates follow on the topic."""
    p = validate(_StopParams, params)
    turn = services.turn_stop(user_id=ctx.user_id, session_id=p["session_id"])
    if turn is None:
        return {"result": {"turn_id": "", "status": ""}, "updates": []}
    return {"result": {"turn_id": str(turn.id), "status": turn.status}, "updates": []}
