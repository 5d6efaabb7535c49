"""The live-call tools: ``rt_children`` (create, list, stop an rtchild) and ``rt_transcript``."""

from __future__ import annotations

import json
from typing import Any

from apps.turns.server_tools import ServerTool, ToolContext, ToolError, register

from . import services
from .models import NAME_MAX

_CHANNEL = {"type": "string", "minLength": 1, "maxLength": NAME_MAX}


def rt_children(ctx: ToolContext, args: dict[str, Any]) -> str:
    action = args["action"]
    try:
        if action == "create":
            call = services.call_create(
                user_id=ctx.user_id, session_id=ctx.session_id, turn_id=ctx.turn_id,
                call_message_id=ctx.message_id, inputch=args.get("inputch", ""),
                outputch=args.get("outputch", ""), instruction=args.get("instruction", ""),
                title=args.get("title", ""))
            return (f'rtchild created: id "{call.id}", listening on {call.input_channel}, '
                    f"speaking on {call.output_channel}. It is idle until input arrives (no "
                    "tokens meanwhile). Verify it: after the next input, rt_children list "
                    "should show its turns +1; if not, the channels are wrong: stop it and "
                    "create it again. Stop it when the call ends.")
        if action == "list":
            calls = services.call_list(user_id=ctx.user_id, session_id=ctx.session_id)
            if not calls:
                return "No live calls in this session."
            return json.dumps(calls, ensure_ascii=False)
        if not args.get("id"):
            raise ToolError("stop needs the id of the rtchild (rt_children action list)")
        call = services.call_for(user_id=ctx.user_id, session_id=ctx.session_id,
                                 call_id=args["id"])
        if not services.call_stop(call, reason="stopped by the agent", notify=False):
            call.refresh_from_db()
            return f"Live call {call.id} had already stopped. " + services.handover_text(call)
        call.refresh_from_db()
        return services.handover_text(call)
    except services.Refused as exc:
        raise ToolError(str(exc)) from None


def rt_transcript(ctx: ToolContext, args: dict[str, Any]) -> str:
    try:
        call = services.call_for(user_id=ctx.user_id, session_id=ctx.session_id,
                                 call_id=args["id"])
    except services.Refused as exc:
        raise ToolError(str(exc)) from None
    return services.transcript(call, offset=int(args.get("offset", 0)),
                               limit=int(args.get("limit", 20)))


RT_CHILDREN = register(ServerTool(
    name="rt_children",
    description=(
        "Live calls: an rtchild answers a caller in real time; each new input interrupts it. "
        "create {inputch, outputch}: two realtime channels a plugin registered (in, out). "
        "list: ids, state, turns. stop {id}: ends the call and hands it back (page it with "
        "rt_transcript). Stop it when the call ends."
    ),
    parameters={
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["create", "list", "stop"]},
            "inputch": _CHANNEL,
            "outputch": _CHANNEL,
            "instruction": {"type": "string", "maxLength": 20000,
                            "description": "create: the rtchild's role in the call."},
            "title": {"type": "string", "maxLength": 200},
            "id": {"type": "string", "maxLength": 64},
        },
        "required": ["action"],
        "additionalProperties": False,
    },
    approval="auto",
    handler=rt_children,
))

RT_TRANSCRIPT = register(ServerTool(
    name="rt_transcript",
    description=(
        "A page of a live call's stored transcript, oldest first (limit default 20, at most "
        "100)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "id": {"type": "string", "minLength": 1, "maxLength": 64},
            "offset": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        },
        "required": ["id"],
        "additionalProperties": False,
    },
    approval="auto",
    handler=rt_transcript,
))
