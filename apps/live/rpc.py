"""RPC namespace ``v1.channel.*``: plugins register channels and feed live calls.

Scoped to the caller: channel names are per user, another user's channel is
``channel.not_found``, and a ``session_id`` must be the caller's (``session.not_found``).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway.params import validate
from apps.gateway.registry import RpcContext, rpc
from apps.gateway.wire import Timestamp, WireSerializer, replies, shape, success

from . import services
from .models import NAME_MAX, Channel, Direction


class ChannelSerializer(WireSerializer):
    name = serializers.CharField()
    direction = serializers.ChoiceField(choices=Direction.values)
    realtime = serializers.BooleanField()
    session_id = serializers.CharField(allow_null=True)
    created_at = Timestamp()


def _channel(c: Channel) -> dict[str, Any]:
    return {"name": c.name, "direction": c.direction, "realtime": c.realtime,
            "session_id": str(c.session_id) if c.session_id else None,
            "created_at": c.created_at}


class _RegisterParams(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX)
    direction = serializers.ChoiceField(choices=Direction.values)
    realtime = serializers.BooleanField(required=False, default=False)
    session_id = serializers.UUIDField(required=False, allow_null=True)


class _NameParams(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX)


class _InputParams(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX)
    text = serializers.CharField(trim_whitespace=False)
    client_id = serializers.CharField(required=False, allow_blank=True, max_length=64)


@rpc("v1.channel.register")
@replies(shape("ChannelRegisterReply", channel=ChannelSerializer()))
def channel_register(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Register (or re-register) a channel: ``{channel}``. ``realtime`` channels can carry a
    live call; ``session_id`` limits it to one session's agent."""
    p = validate(_RegisterParams, params)
    channel = services.channel_register(
        user_id=ctx.user_id, name=p["name"], direction=p["direction"],
        realtime=p["realtime"], session_id=p.get("session_id"))
    return {"channel": _channel(channel)}


@rpc("v1.channel.unregister")
@replies(shape("ChannelUnregisterReply", unregistered=success(),
               stopped=serializers.ListField(child=serializers.CharField())))
def channel_unregister(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Remove a channel; the live calls using it stop: ``{unregistered, stopped: [ids]}``."""
    p = validate(_NameParams, params)
    stopped = services.channel_unregister(user_id=ctx.user_id, name=p["name"])
    return {"unregistered": True, "stopped": stopped}


@rpc("v1.channel.list")
@replies(shape("ChannelListReply", items=ChannelSerializer(many=True)))
def channel_list(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """The caller's channels: ``{items}``."""
    return {"items": [_channel(c) for c in services.channel_list(user_id=ctx.user_id)]}


@rpc("v1.channel.input")
@replies(shape("ChannelInputReply", delivered=serializers.BooleanField(),
               live_call_id=serializers.CharField(allow_null=True),
               message_id=serializers.CharField(allow_null=True),
               interrupted=serializers.BooleanField()))
def channel_input(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Input on an ``in`` channel: the live call reading it is interrupted and answers this.
    ``{delivered: false}`` (nothing stored) when no running call reads the channel."""
    p = validate(_InputParams, params)
    out = services.channel_input(user_id=ctx.user_id, name=p["name"], text=p["text"],
                                 client_id=p.get("client_id") or "")
    return {"delivered": out.delivered, "live_call_id": out.live_call_id,
            "message_id": out.message_id, "interrupted": out.interrupted}
