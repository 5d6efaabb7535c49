"""RPC namespaces ``v1.goal.*``, ``v1.loop.*`` (the widget's ``/goal`` and ``/loop``) and
``v1.subagent.stop``.

Handlers adapt: validate params, make one service or selector call, return the reply its
``@replies`` schema renders. Actions answer ``{result, updates}``, queries ``{item}`` or
``{items, next_cursor}``. Everything is scoped to the caller: another user's session or loop is
``session.not_found`` / ``loop.not_found``.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway.params import validate
from apps.gateway.registry import RpcContext, rpc
from apps.gateway.wire import Id, action, page, replies, shape, success
from apps.sessions.models import WorkMode

from . import goals, loops, selectors, subagents
from .models import GoalStatus
from .sending import NewSession
from .serializers import GoalSerializer, LoopSerializer


class _SessionParams(serializers.Serializer):
    session_id = serializers.UUIDField()


class _TargetParams(serializers.Serializer):
    """The session: ``session_id``, or, in a new conversation, what a creating
    ``v1.message.send`` carries (``client_session_id``, ``agent_prompt``, ``work_mode``,
    ``host_functions``): the first message then creates the session."""

    session_id = serializers.UUIDField(required=False, allow_null=True)
    client_session_id = serializers.CharField(required=False, allow_blank=True, max_length=128)
    agent_prompt = serializers.CharField(required=False, allow_null=True, allow_blank=True,
                                         max_length=20000, trim_whitespace=False)
    work_mode = serializers.ChoiceField(choices=WorkMode.choices, required=False,
                                        allow_null=True)
    host_functions = serializers.JSONField(required=False, allow_null=True)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) and data.get("session_id") == "":
            data = {**data, "session_id": None}  # "" means: a new conversation
        return super().to_internal_value(data)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("session_id") is None and not attrs.get("client_session_id"):
            raise serializers.ValidationError(
                {"session_id": "required (or client_session_id, to start a new conversation)"})
        return attrs


def _target(ctx: RpcContext, p: dict[str, Any]) -> dict[str, Any]:
    if p.get("session_id") is not None:
        return {"session_id": p["session_id"]}
    return {"session_id": None, "new_session": NewSession(
        client_session_id=p["client_session_id"], device_id=ctx.device_id,
        agent_prompt=p.get("agent_prompt"), work_mode=p.get("work_mode"),
        host_functions=p.get("host_functions"))}


class _GoalSetParams(_TargetParams):
    condition = serializers.CharField(trim_whitespace=False)
    max_rounds = serializers.IntegerField(required=False, allow_null=True)


class _LoopCreateParams(_TargetParams):
    prompt = serializers.CharField(trim_whitespace=False)
    interval_seconds = serializers.IntegerField()
    max_runs = serializers.IntegerField(required=False, allow_null=True)


class _LoopListParams(serializers.Serializer):
    session_id = serializers.UUIDField(required=False, allow_null=True)
    cursor = serializers.CharField(required=False, allow_blank=True, allow_null=True)
    limit = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class _LoopParams(serializers.Serializer):
    loop_id = serializers.UUIDField()


@rpc("v1.goal.set")
@replies(action("GoalSet", goal_id=Id()))
def goal_set(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Set the session's goal (``/goal <condition>``), replacing an active one, and start the
    work: ``{goal_id}``; the Updates carry the goal (and the replaced one, and the first
    message). ``max_rounds`` defaults to 50. Without ``session_id``, the first message creates
    the session (``client_session_id``, ``agent_prompt``, ... as for ``v1.message.send``)."""
    p = validate(_GoalSetParams, params)
    change = goals.goal_set(user_id=ctx.user_id, condition=p["condition"],
                            max_rounds=p.get("max_rounds"), **_target(ctx, p))
    assert change.goal is not None
    return {"result": {"goal_id": str(change.goal.id)}, "updates": change.updates}


@rpc("v1.goal.cancel")
@replies(action("GoalCancel", success=success()))
def goal_cancel(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Cancel the session's active goal (``/goal clear``); success without Updates when there
    is none."""
    p = validate(_SessionParams, params)
    change = goals.goal_end(user_id=ctx.user_id, session_id=p["session_id"],
                            to=GoalStatus.CANCELLED, outcome="cancelled by the user")
    return {"result": {"success": True}, "updates": change.updates}


@rpc("v1.goal.get")
@replies(shape("GoalGetReply", item=GoalSerializer(allow_null=True)))
def goal_get(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """The session's active goal, else its latest one: ``{item}`` (``null``: never had one)."""
    p = validate(_SessionParams, params)
    return {"item": selectors.goal_get(user_id=ctx.user_id, session_id=p["session_id"])}


@rpc("v1.loop.create")
@replies(action("LoopCreate", loop_id=Id()))
def loop_create(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Create a loop (``/loop <interval> <prompt>``): its first run is due at once, then every
    ``interval_seconds``, at most ``max_runs`` times (default 100): ``{loop_id}``. Without
    ``session_id``, the first run is sent now and creates the session (``client_session_id``,
    ``agent_prompt``, ... as for ``v1.message.send``)."""
    p = validate(_LoopCreateParams, params)
    change = loops.loop_create(user_id=ctx.user_id, prompt=p["prompt"],
                               interval_seconds=p["interval_seconds"],
                               max_runs=p.get("max_runs"), run_now=True, **_target(ctx, p))
    return {"result": {"loop_id": str(change.loop.id)}, "updates": change.updates}


@rpc("v1.loop.list")
@replies(page(LoopSerializer, serializers.CharField(allow_blank=True)))
def loop_list(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """The caller's loops (of ``session_id`` when given), newest first: ``{items,
    next_cursor}`` ("" at the end)."""
    p = validate(_LoopListParams, params)
    found = selectors.loop_list(user_id=ctx.user_id, session_id=p.get("session_id"),
                                cursor=p.get("cursor"), limit=p.get("limit"))
    return {"items": found.items, "next_cursor": found.next_cursor}


@rpc("v1.loop.stop")
@replies(action("LoopStop", success=success()))
def loop_stop(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Stop a loop; success without Updates when it had already ended."""
    p = validate(_LoopParams, params)
    change = loops.loop_stop(user_id=ctx.user_id, loop_id=p["loop_id"],
                             reason="stopped by the user")
    return {"result": {"success": True}, "updates": change.updates}


@rpc("v1.subagent.stop")
@replies(action("SubAgentStop", success=success(),
                stopped=serializers.ListField(child=serializers.CharField())))
def subagent_stop(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Stop one of the caller's sub-agents and everything it started, leaves first: ``{success,
    stopped}`` (the session ids that were still running). A turn waiting on it resumes, told
    it was stopped. ``updates`` is empty: the sessions' and turns' Updates follow on the
    topic. Another user's session is ``session.not_found``."""
    p = validate(_SessionParams, params)
    stopped = subagents.subagent_stop(user_id=ctx.user_id, session_id=p["session_id"])
    return {"result": {"success": True, "stopped": [str(s.session_id) for s in stopped]},
            "updates": []}
