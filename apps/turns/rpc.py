"""RPC namespace ``v1.turn.*`` (reads). ``v1.turn.stop`` belongs with the engine.

Queries answer ``{items, next_cursor}`` (``next_cursor`` "" at the end) and ``{item}``; every
read is scoped to the caller, another user's ids are ``turn.not_found`` / ``session.not_found``.
Replies are rendered by their ``@replies`` schema (``apps.gateway.wire``).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway.params import validate
from apps.gateway.registry import RpcContext, rpc
from apps.gateway.wire import RefId, action, one, page, replies, success

from . import selectors, services
from .models import TurnStatus
from .serializers import TurnSerializer


class _ListParams(serializers.Serializer):
    session_id = serializers.UUIDField()
    cursor = serializers.CharField(required=False, allow_blank=True, allow_null=True)
    limit = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class _GetParams(serializers.Serializer):
    turn_id = serializers.UUIDField()


@rpc("v1.turn.list")
@replies(page(TurnSerializer, serializers.CharField(allow_blank=True)))
def turn_list(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Turns of one of the caller's sessions, oldest first."""
    p = validate(_ListParams, params)
    found = selectors.turn_list(
        user_id=ctx.user_id,
        session_id=p["session_id"],
        cursor=p.get("cursor"),
        limit=p.get("limit"),
    )
    return {"items": found.items, "next_cursor": found.next_cursor}


@rpc("v1.turn.get")
@replies(one(TurnSerializer))
def turn_get(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """One of the caller's turns."""
    p = validate(_GetParams, params)
    return {"item": selectors.turn_get(user_id=ctx.user_id, turn_id=p["turn_id"])}


class _StopParams(serializers.Serializer):
    session_id = serializers.UUIDField()
    client_id = serializers.CharField(required=False, allow_blank=True, max_length=128)


@rpc("v1.turn.stop")
@replies(action("TurnStop", success=success(), turn_id=RefId(),
                status=serializers.ChoiceField(choices=["", *TurnStatus.values])))
def turn_stop(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Stop the session's open turn: ``{success: true, turn_id, status}`` (``turn_id`` and
    ``status`` "" when none was open, which is a success too).

    ``updates`` is always empty, as in the original: the turn's own Updates follow on the topic."""
    p = validate(_StopParams, params)
    turn = services.turn_stop(user_id=ctx.user_id, session_id=p["session_id"])
    if turn is None:
        return {"result": {"success": True, "turn_id": "", "status": ""}, "updates": []}
    return {"result": {"success": True, "turn_id": str(turn.id), "status": turn.status},
            "updates": []}
