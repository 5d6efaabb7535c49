"""The server-tool registry: discovery, schemas in a stable order, argument validation, refusals
as ``[Tool Error]`` texts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from apps.memory.models import UserMemory
from apps.turns import server_tools
from apps.turns.server_tools import ServerTool, ToolContext, ToolError
from rtcagent.errors import NotFound

MEMORY_TOOLS = ["deleteMemory", "saveMemory", "saveSessionMemory", "searchMemory",
                "updateMemory"]


@pytest.fixture
def registry() -> Iterator[None]:
    """Tools registered by a test are gone after it."""
    saved = dict(server_tools._registry), dict(server_tools._validators)
    yield
    server_tools._registry.clear()
    server_tools._registry.update(saved[0])
    server_tools._validators.clear()
    server_tools._validators.update(saved[1])


def _tool(name: str = "probeTool", handler: Any = None, **changes: Any) -> ServerTool:
    fields: dict[str, Any] = {
        "name": name, "description": "A probe.", "approval": "auto",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
                       "required": ["n"], "additionalProperties": False},
        "handler": handler or (lambda ctx, args: f"n={args['n']} user={ctx.user_id}"),
    }
    return ServerTool(**{**fields, **changes})


CTX = ToolContext(user_id=7, session_id="s", turn_id="t", message_id=None)


def test_the_memory_tools_are_discovered_at_start_up() -> None:
    assert [n for n in server_tools.names() if n in MEMORY_TOOLS] == MEMORY_TOOLS
    tool = server_tools.get("saveMemory")
    assert tool is not None and tool.approval == "auto"
    assert server_tools.get("noSuchTool") is None


def test_schemas_are_openai_functions_sorted_by_name_and_identical_between_calls() -> None:
    first = server_tools.schemas()
    names = [s["function"]["name"] for s in first]
    assert names == sorted(names)
    assert json.dumps(first) == json.dumps(server_tools.schemas())  # the cached prefix holds
    save = next(s for s in first if s["function"]["name"] == "saveMemory")
    assert save["type"] == "function"
    assert save["function"]["parameters"]["required"] == ["content", "category"]
    assert save["function"]["parameters"]["properties"]["category"]["enum"] == [
        "user", "feedback", "project", "reference"]


@pytest.mark.usefixtures("registry")
def test_a_name_taken_twice_fails_at_registration() -> None:
    server_tools.register(_tool())
    assert server_tools.register(server_tools.get("probeTool")) is server_tools.get("probeTool")
    with pytest.raises(RuntimeError, match="registered twice"):
        server_tools.register(_tool())
    with pytest.raises(RuntimeError, match="registered twice"):
        server_tools.register(_tool(name="read"))  # a browser tool's name


@pytest.mark.usefixtures("registry")
@pytest.mark.parametrize(("changes", "error"), [
    ({"approval": "sometimes"}, "approval"),
    ({"parameters": {"type": "object", "properties": {"n": {"type": "integr"}}}}, "bad schema"),
    ({"parameters": {"type": "string"}}, "object schema"),
])
def test_a_bad_tool_is_refused_at_registration(changes: dict, error: str) -> None:
    with pytest.raises(RuntimeError, match=error):
        server_tools.register(_tool(**changes))
    assert server_tools.get("probeTool") is None


@pytest.mark.usefixtures("registry")
def test_run_validates_arguments_before_the_handler_sees_them() -> None:
    calls: list[dict] = []

    def handler(ctx: ToolContext, args: dict) -> str:
        calls.append(args)
        return "ran"

    server_tools.register(_tool(handler=handler))
    assert server_tools.run("probeTool", CTX, {"n": 2}) == "ran"
    assert server_tools.run("probeTool", CTX, {}) == (
        "[Tool Error] invalid arguments for probeTool: arguments: 'n' is a required property")
    assert server_tools.run("probeTool", CTX, {"n": 0}) == (
        "[Tool Error] invalid arguments for probeTool: n: 0 is less than the minimum of 1")
    assert server_tools.run("probeTool", CTX, {"n": "2"}) == (
        "[Tool Error] invalid arguments for probeTool: n: '2' is not of type 'integer'")
    refused = server_tools.run("probeTool", CTX, {"n": 1, "extra": "x" * 10_000})
    assert refused.startswith("[Tool Error] invalid arguments for probeTool: arguments: "
                              "Additional properties are not allowed")
    assert len(refused) < 400  # the offending value is not echoed whole
    assert server_tools.run("probeTool", CTX, ["n"]) == (  # type: ignore[arg-type]
        "[Tool Error] invalid arguments for probeTool: expected a JSON object")
    assert calls == [{"n": 2}]


@pytest.mark.usefixtures("registry")
def test_refusals_become_tool_errors_and_other_failures_propagate() -> None:
    def refuse(ctx: ToolContext, args: dict) -> str:
        if args["n"] == 1:
            raise ToolError("not today")
        if args["n"] == 2:
            raise NotFound("memory", 42)
        raise ZeroDivisionError("a bug")

    server_tools.register(_tool(handler=refuse))
    assert server_tools.run("probeTool", CTX, {"n": 1}) == "[Tool Error] not today"
    assert server_tools.run("probeTool", CTX, {"n": 2}) == "[Tool Error] memory 42 not found"
    with pytest.raises(ZeroDivisionError):
        server_tools.run("probeTool", CTX, {"n": 3})
    assert server_tools.run("nope", CTX, {}) == "[Tool Error] unknown tool 'nope'"


@pytest.mark.django_db
def test_a_refused_memory_tool_call_writes_nothing(make_user) -> None:
    user = make_user()
    ctx = ToolContext(user_id=user.id, session_id="00000000-0000-0000-0000-000000000000",
                      turn_id="t")
    out = server_tools.run("saveMemory", ctx, {"content": "x", "category": "hobby"})
    assert out.startswith("[Tool Error] invalid arguments for saveMemory: category: 'hobby' "
                          "is not one of ['user', 'feedback', 'project', 'reference']")
    out = server_tools.run("saveMemory", ctx, {"content": "y" * 4001, "category": "user"})
    assert out.startswith("[Tool Error] invalid arguments for saveMemory: content: ")
    assert not UserMemory.objects.exists()
