"""The agent's goal, loop and todo tools (server tools: they run in the worker, see
``apps.turns.server_tools``).

Goals: ``goal`` (set one), ``completeGoal``, ``cancelGoal`` (the original's ``complete_goal``
and ``cancel_goal``). Loops: ``loop`` (create), ``listLoop``, ``stopLoop``. The todo list:
``todoWrite``. Sub-agents: ``subAgent``, ``listSubAgent``, ``getSubAgentMessage``,
``stopSubAgent`` (``apps.tasks.subagents``). Each handler is one service call; refusals come
back to the model as ``[Tool Error] ...``. Names are camelCase as the rest of the tools;
``docs/tasks.md`` and ``docs/subagents.md`` list the original's snake_case spellings.
"""

from __future__ import annotations

import json
from typing import Any

from apps.gateway.wire import iso
from apps.turns.server_tools import Deferred, ServerTool, ToolContext, ToolError, register

from . import goals, loops, selectors, subagents, todos
from .limits import DEFAULTS
from .models import GoalStatus
from .prompt import todo_summary


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


def _text(limit: int, description: str) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": limit, "description": description}


# --- goals ------------------------------------------------------------------------------------


def set_goal(ctx: ToolContext, args: dict[str, Any]) -> str:
    change = goals.goal_set(user_id=ctx.user_id, session_id=ctx.session_id,
                            condition=args["condition"], max_rounds=args.get("max_rounds"),
                            kickoff=False)
    goal = change.goal
    assert goal is not None
    text = (f"Goal set (at most {goal.max_rounds} rounds): {goal.condition}\n"
            "Work towards it now; when you finish a turn the next round starts by itself. Call "
            "completeGoal when the condition is met, or cancelGoal if it cannot be met.")
    if change.replaced is not None:
        text += f"\nThe previous goal was cancelled: {change.replaced.condition}"
    return text


def _end_goal(ctx: ToolContext, to: str, outcome: str) -> str:
    change = goals.goal_end(user_id=ctx.user_id, session_id=ctx.session_id, to=to,
                            outcome=outcome)
    if not change.updates or change.goal is None:
        raise ToolError("there is no active goal in this session")
    return change.goal.condition


def complete_goal(ctx: ToolContext, args: dict[str, Any]) -> str:
    condition = _end_goal(ctx, GoalStatus.COMPLETED, args.get("summary", ""))
    return (f"Goal completed: {condition}\nNo further rounds will start. Report the result to "
            "the user.")


def cancel_goal(ctx: ToolContext, args: dict[str, Any]) -> str:
    condition = _end_goal(ctx, GoalStatus.CANCELLED, args.get("reason", ""))
    return (f"Goal cancelled: {condition}\nNo further rounds will start. Tell the user why it "
            "could not be met.")


GOAL = register(ServerTool(
    name="goal",
    description=(
        "Set a goal for this session: a completion condition you keep working towards across "
        "turns. After each of your turns a new round starts by itself until you call "
        "completeGoal (the condition is met) or cancelGoal (it cannot be met), or the round "
        "limit is reached. Use it when the user asks you to keep going until something is "
        "true (\"until all tests pass\"). State the condition so it can be checked. Setting a "
        "goal replaces the session's active goal."
    ),
    parameters=_obj({
        "condition": _text(DEFAULTS["GOAL_CONDITION_MAX_CHARS"],
                           "The completion condition, checkable, e.g. 'all tests in "
                           "tests/api pass'."),
        "max_rounds": {"type": "integer", "minimum": 1, "maximum": DEFAULTS["GOAL_MAX_ROUNDS"],
                       "description": "Most turns to spend on it (default 50)."},
    }, ["condition"]),
    approval="auto",
    handler=set_goal,
))

COMPLETE_GOAL = register(ServerTool(
    name="completeGoal",
    description=(
        "Declare the session's active goal achieved: its condition is met. Only call it when "
        "you have checked that it is; no further rounds start."
    ),
    parameters=_obj({"summary": {"type": "string", "maxLength": 2000,
                                 "description": "How you know the condition is met."}}, []),
    approval="auto",
    handler=complete_goal,
))

CANCEL_GOAL = register(ServerTool(
    name="cancelGoal",
    description=(
        "Cancel the session's active goal: its condition cannot be met, or the user no longer "
        "wants it. No further rounds start."
    ),
    parameters=_obj({"reason": {"type": "string", "maxLength": 2000,
                                "description": "Why the goal is cancelled."}}, []),
    approval="auto",
    handler=cancel_goal,
))


# --- loops ------------------------------------------------------------------------------------


def _loop_json(loop: Any) -> dict[str, Any]:
    return {"loop_id": str(loop.id), "prompt": loop.prompt,
            "interval_seconds": loop.interval_seconds, "runs": loop.runs,
            "max_runs": loop.max_runs, "status": loop.status,
            "next_run_at": iso(loop.next_run_at)}


def create_loop(ctx: ToolContext, args: dict[str, Any]) -> str:
    change = loops.loop_create(user_id=ctx.user_id, session_id=ctx.session_id,
                               prompt=args["prompt"], interval_seconds=args["interval_seconds"],
                               max_runs=args.get("max_runs"), run_now=False)
    loop = change.loop
    return (f"Loop {loop.id} created: the prompt is sent into this session every "
            f"{loop.interval_seconds} seconds, at most {loop.max_runs} times; the first run "
            f"is at {iso(loop.next_run_at)}. Stop it with stopLoop.")


def list_loops(ctx: ToolContext, args: dict[str, Any]) -> str:
    page = selectors.loop_list(user_id=ctx.user_id, session_id=ctx.session_id, limit=50)
    return json.dumps([_loop_json(loop) for loop in page.items], ensure_ascii=False)


def stop_loop(ctx: ToolContext, args: dict[str, Any]) -> str:
    loop = selectors.loop_get(user_id=ctx.user_id, loop_id=args["loop_id"])
    if str(loop.session_id) != str(ctx.session_id):
        raise ToolError(f"loop {loop.id} belongs to another session")
    change = loops.loop_stop(user_id=ctx.user_id, loop_id=loop.id, reason="stopped by the agent")
    if not change.updates:
        return f"Loop {loop.id} had already ended ({change.loop.status}); nothing to stop."
    return f"Loop {loop.id} stopped after {change.loop.runs} runs."


LOOP = register(ServerTool(
    name="loop",
    description=(
        "Run a prompt on a schedule: it is sent into this session as a user message every "
        "interval_seconds (first one interval from now), at most max_runs times. Use it for "
        "recurring checks (\"check the deployment every 10 minutes\"). A run is skipped while "
        "the previous one has not started yet. Stop it with stopLoop."
    ),
    parameters=_obj({
        "prompt": _text(DEFAULTS["LOOP_PROMPT_MAX_CHARS"],
                        "The message to send each time; self-contained."),
        "interval_seconds": {"type": "integer", "minimum": 1,
                             "description": "Seconds between runs (at least 60 by default)."},
        "max_runs": {"type": "integer", "minimum": 1, "maximum": DEFAULTS["LOOP_MAX_RUNS"],
                     "description": "Most runs (default 100)."},
    }, ["prompt", "interval_seconds"]),
    approval="auto",
    handler=create_loop,
))

LIST_LOOP = register(ServerTool(
    name="listLoop",
    description=(
        "List this session's loops as a JSON array of {loop_id, prompt, interval_seconds, "
        "runs, max_runs, status (active|stopped|finished), next_run_at}, newest first."
    ),
    parameters=_obj({}, []),
    approval="auto",
    handler=list_loops,
))

STOP_LOOP = register(ServerTool(
    name="stopLoop",
    description="Stop one of this session's loops (its id from loop or listLoop).",
    parameters=_obj({"loop_id": {"type": "string", "format": "uuid", "minLength": 1,
                                 "maxLength": 64}}, ["loop_id"]),
    approval="auto",
    handler=stop_loop,
))


# --- todos ------------------------------------------------------------------------------------


def write_todos(ctx: ToolContext, args: dict[str, Any]) -> str:
    given = [
        {"content": t["content"], "status": t["status"],
         "active_form": t.get("active_form", t.get("activeForm", ""))}
        for t in args["todos"]
    ]
    change = todos.todo_write(user_id=ctx.user_id, session_id=ctx.session_id, todos=given)
    return todo_summary(change.items)


_TODO_ITEM = _obj({
    "content": _text(DEFAULTS["TODO_ITEM_MAX_CHARS"],
                     "The task, imperative: 'Run the tests'."),
    "status": {"type": "string", "enum": list(todos.TODO_STATUSES)},
    "active_form": {"type": "string", "maxLength": DEFAULTS["TODO_ITEM_MAX_CHARS"],
                    "description": "The task while it is done: 'Running the tests'."},
    "activeForm": {"type": "string", "maxLength": DEFAULTS["TODO_ITEM_MAX_CHARS"],
                   "description": "Same as active_form."},
}, ["content", "status"])

TODO_WRITE = register(ServerTool(
    name="todoWrite",
    description=(
        "Write this session's todo list (the whole list each time; [] clears it). The user "
        "sees it. Use it for work of three steps or more: list the steps, mark one "
        "in_progress when you start it (one at a time), and completed as soon as it is done; "
        "add steps you discover. Do not use it for a single simple step."
    ),
    parameters=_obj({"todos": {"type": "array", "maxItems": DEFAULTS["TODO_MAX_ITEMS"],
                               "items": _TODO_ITEM}}, ["todos"]),
    approval="auto",
    handler=write_todos,
))


# --- sub-agents -------------------------------------------------------------------------------


def _sub_session_id(args: dict[str, Any]) -> str:
    return str(args.get("sub_session_id") or args.get("id") or "")


def start_sub_agent(ctx: ToolContext, args: dict[str, Any]) -> str | Deferred:
    mode = args.get("mode", "async")
    try:
        sub = subagents.subagent_start(
            user_id=ctx.user_id, session_id=ctx.session_id, turn_id=ctx.turn_id,
            call_message_id=ctx.message_id, title=args["title"],
            instruction=args["instruction"], mode=mode)
    except subagents.Refused as exc:
        raise ToolError(str(exc)) from None
    if sub.mode == "sync":
        return Deferred(str(sub.session_id))
    return subagents.started_text(sub)


def _sub_agent_json(sub: Any) -> dict[str, Any]:
    last = subagents.last_message(sub.session_id)
    text = subagents.message_text(last)
    return {"sub_session_id": str(sub.session_id), "title": sub.title, "status": sub.status,
            "mode": sub.mode, "parent_session_id": str(sub.parent_session_id),
            "last_message": text[:500] + ("…" if len(text) > 500 else ""),
            "created_at": iso(sub.created_at), "updated_at": iso(sub.updated_at)}


def list_sub_agents(ctx: ToolContext, args: dict[str, Any]) -> str:
    found = subagents.descendants(ctx.session_id)
    return json.dumps([_sub_agent_json(sub) for sub in found], ensure_ascii=False)


def get_sub_agent_message(ctx: ToolContext, args: dict[str, Any]) -> str:
    try:
        target = subagents.in_tree(user_id=ctx.user_id, caller_session_id=ctx.session_id,
                                   target_id=_sub_session_id(args))
    except subagents.Refused as exc:
        raise ToolError(str(exc)) from None
    sub = getattr(target, "sub_agent", None)
    msg = subagents.last_message(target.id)
    return json.dumps({
        "sub_session_id": str(target.id), "sub_session_title": target.title,
        "sub_session_status": sub.status if sub is not None else target.status,
        "message_id": str(msg.id) if msg else None, "role": msg.role if msg else None,
        "content": subagents.message_text(msg),
        "created_at": iso(msg.created_at) if msg else None,
    }, ensure_ascii=False)


def stop_sub_agent(ctx: ToolContext, args: dict[str, Any]) -> str:
    try:
        target = subagents.in_tree(user_id=ctx.user_id, caller_session_id=ctx.session_id,
                                   target_id=_sub_session_id(args))
    except subagents.Refused as exc:
        raise ToolError(str(exc)) from None
    # The caller asked: its own child's end is not sent back to it as a message.
    direct = str(target.parent_session_id) == str(ctx.session_id)
    stopped = subagents.stop_tree(target.id, reason="stopped by stopSubAgent",
                                  notify_top=not direct)
    return json.dumps({
        "stopped_sessions": [{"sub_session_id": str(s.session_id), "title": s.title}
                             for s in stopped],
        "total_stopped": len(stopped),
    }, ensure_ascii=False)


_SUB_ID = {"type": "string", "minLength": 1, "maxLength": 64,
           "description": "The sub-agent's sub_session_id."}
_SUB_TARGET = {**_obj({"sub_session_id": _SUB_ID, "id": {**_SUB_ID, "description": "Alias."}},
                      []),
               "anyOf": [{"required": ["sub_session_id"]}, {"required": ["id"]}]}

SUB_AGENT = register(ServerTool(
    name="subAgent",
    description=(
        "Start a sub-agent: a session with a blank context that does one task and reports its "
        "final answer. Calls in one answer run in parallel. Brief it fully (paths, context, "
        "what was ruled out): it knows nothing of this conversation. mode 'sync': you get its "
        "answer as this call's result; 'async' (default): returns at once, the answer comes "
        "later as a message."
    ),
    parameters=_obj({
        "title": _text(subagents.DEFAULTS["SUBAGENT_TITLE_MAX_CHARS"], "3-5 words."),
        "instruction": _text(subagents.DEFAULTS["SUBAGENT_INSTRUCTION_MAX_CHARS"],
                             "The complete task."),
        "mode": {"type": "string", "enum": list(subagents.MODES)},
    }, ["title", "instruction"]),
    approval="auto",
    handler=start_sub_agent,
))

LIST_SUB_AGENT = register(ServerTool(
    name="listSubAgent",
    description=(
        "List the sub-agents below this session: JSON [{sub_session_id, title, status "
        "(running|completed|failed|stopped), mode, parent_session_id, last_message, ...}]."
    ),
    parameters=_obj({}, []),
    approval="auto",
    handler=list_sub_agents,
))

GET_SUB_AGENT_MESSAGE = register(ServerTool(
    name="getSubAgentMessage",
    description="The latest message of one of your sub-agents (JSON).",
    parameters=_SUB_TARGET,
    approval="auto",
    handler=get_sub_agent_message,
))

STOP_SUB_AGENT = register(ServerTool(
    name="stopSubAgent",
    description="Stop one of your sub-agents and those it started; a turn waiting on it "
                "resumes.",
    parameters=_SUB_TARGET,
    approval="auto",
    handler=stop_sub_agent,
))
