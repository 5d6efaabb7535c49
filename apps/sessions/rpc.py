"""RPC namespace ``v1.session.*`` and ``v1.message.*`` (reads and session actions).

Handlers adapt: validate params, make one selector or service call, and return the reply, which
its ``@replies`` schema (``apps.gateway.wire``) renders. Queries answer the data (``{items,
next_cursor}`` for lists, ``{item}`` for one entity, as api.yaml's ``*ListResponse`` /
``*GetResponse``); actions answer ``{result, updates}``. Everything is scoped to the caller:
another user's ids are ``<entity>.not_found``.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway.params import validate
from apps.gateway.registry import RpcContext, rpc
from apps.gateway.wire import Id, RefId, action, one, page, replies, success

from . import selectors, services
from .models import WorkMode
from .serializers import MessageSerializer, SessionSerializer


class _PageParams(serializers.Serializer):
    cursor = serializers.CharField(required=False, allow_blank=True, allow_null=True)
    limit = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class _ListParams(_PageParams):
    parent_session_id = serializers.UUIDField(required=False, allow_null=True)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) and data.get("parent_session_id") == "":
            data = {**data, "parent_session_id": None}  # "": the root sessions
        return super().to_internal_value(data)


class _SessionParams(serializers.Serializer):
    session_id = serializers.UUIDField()


class _CloseParams(_SessionParams):
    client_id = serializers.CharField(required=False, allow_blank=True, allow_null=True)


class _UpdateParams(_SessionParams):
    title = serializers.CharField(
        required=False,
        allow_blank=True,
        allow_null=True,
        trim_whitespace=False,
        max_length=services.TITLE_MAX,
    )
    work_mode = serializers.ChoiceField(choices=WorkMode.choices, required=False, allow_null=True)
    deleted_at = serializers.DateTimeField(required=False, allow_null=True)


class _ForkParams(serializers.Serializer):
    old_server_session_id = serializers.UUIDField()
    old_server_message_id = serializers.UUIDField()
    new_client_session_id = serializers.CharField(max_length=128)
    new_client_message_id = serializers.CharField(max_length=128)
    content_data = serializers.JSONField()
    limit = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class _MessageListParams(_SessionParams):
    cursor = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    limit = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class _MessageParams(serializers.Serializer):
    message_id = serializers.UUIDField()


@rpc("v1.session.list")
@replies(page(SessionSerializer, serializers.CharField(allow_blank=True)))
def session_list(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """The caller's root sessions, or with ``parent_session_id`` the sub-agents that session
    started; newest update first: ``{items, next_cursor}`` ("" at the end)."""
    p = validate(_ListParams, params)
    found = selectors.session_list(
        user_id=ctx.user_id, cursor=p.get("cursor"), limit=p.get("limit"),
        parent_session_id=p.get("parent_session_id") or None,
    )
    return {"items": found.items, "next_cursor": found.next_cursor}


@rpc("v1.session.get")
@replies(one(SessionSerializer))
def session_get(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """One of the caller's sessions: ``{item}``."""
    p = validate(_SessionParams, params)
    session = selectors.session_get(user_id=ctx.user_id, session_id=p["session_id"])
    selectors.with_lineage([session])
    return {"item": session}


@rpc("v1.session.open")
@replies(action("SessionOpen", success=success()))
def session_open(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Reopen a closed session (closed -> idle); success without Updates if it is not closed."""
    p = validate(_SessionParams, params)
    change = services.session_open(user_id=ctx.user_id, session_id=p["session_id"])
    return {"result": {"success": True}, "updates": change.updates}


@rpc("v1.session.close")
@replies(action("SessionClose", success=success()))
def session_close(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Close a session; ``client_id`` is accepted and not used for deduplication."""
    p = validate(_CloseParams, params)
    change = services.session_close(user_id=ctx.user_id, session_id=p["session_id"])
    return {"result": {"success": True}, "updates": change.updates}


@rpc("v1.session.update")
@replies(action("SessionUpdate", session_id=Id()))
def session_update(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Change ``title`` / ``work_mode`` or soft-delete (``deleted_at``): ``{session_id}``."""
    p = validate(_UpdateParams, params)
    change = services.session_update(
        user_id=ctx.user_id,
        session_id=p["session_id"],
        title=p.get("title"),
        work_mode=p.get("work_mode"),
        deleted_at=p.get("deleted_at"),
    )
    return {"result": {"session_id": str(change.session.id)}, "updates": change.updates}


@rpc("v1.session.fork")
@replies(action("SessionFork", session_id=Id(), turn_id=RefId(),
                message_ids=serializers.ListField(child=Id())))
def session_fork(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Fork before a message with new content: ``{session_id, turn_id: "", message_ids}``."""
    p = validate(_ForkParams, params)
    limit = p.get("limit")
    fork = services.session_fork(
        user_id=ctx.user_id,
        device_id=ctx.device_id,
        old_session_id=p["old_server_session_id"],
        old_message_id=p["old_server_message_id"],
        new_client_session_id=p["new_client_session_id"],
        new_client_message_id=p["new_client_message_id"],
        content=p["content_data"],
        limit=services.FORK_LIMIT_DEFAULT if limit is None else limit,
    )
    result = {
        "session_id": str(fork.session.id),
        "turn_id": "",
        "message_ids": [str(m.id) for m in fork.messages],
    }
    return {"result": result, "updates": fork.updates}


@rpc("v1.message.list")
@replies(page(MessageSerializer, serializers.IntegerField(allow_null=True)))
def message_list(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Messages after ``cursor`` (a global_offset), ascending: ``{items, next_cursor}``
    (``next_cursor`` is ``null`` at the end: 0 would be a valid cursor)."""
    p = validate(_MessageListParams, params)
    found = selectors.message_list(
        user_id=ctx.user_id,
        session_id=p["session_id"],
        cursor=p.get("cursor"),
        limit=p.get("limit"),
    )
    return {"items": found.items, "next_cursor": found.next_cursor}


@rpc("v1.message.get")
@replies(one(MessageSerializer))
def message_get(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """One of the caller's messages: ``{item}``."""
    p = validate(_MessageParams, params)
    return {"item": selectors.message_get(user_id=ctx.user_id, message_id=p["message_id"])}


class _SendParams(serializers.Serializer):
    content_data = serializers.JSONField()
    client_id = serializers.CharField(max_length=128)
    client_session_id = serializers.CharField(
        required=False, allow_blank=True, max_length=128, default=""
    )
    server_session_id = serializers.UUIDField(required=False, allow_null=True)
    agent_prompt = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=20000, trim_whitespace=False
    )
    work_mode = serializers.ChoiceField(choices=WorkMode.choices, required=False, allow_null=True)
    host_functions = serializers.JSONField(required=False, allow_null=True)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict) and data.get("server_session_id") == "":
            data = {**data, "server_session_id": None}  # "" means: create the session
        return super().to_internal_value(data)


@rpc("v1.message.send")
@replies(action("MessageSend", session_id=Id(), turn_id=RefId(), message_id=Id()))
def message_send(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Send a user message: ``{session_id, turn_id: "", message_id}``; the turn starts async.
    ``agent_prompt`` is kept only when the message creates the session."""
    p = validate(_SendParams, params)
    sent = services.message_send(
        user_id=ctx.user_id,
        device_id=ctx.device_id,
        content=p["content_data"],
        client_id=p["client_id"],
        client_session_id=p["client_session_id"],
        server_session_id=p.get("server_session_id"),
        agent_prompt=p.get("agent_prompt"),
        work_mode=p.get("work_mode"),
        host_functions=p.get("host_functions"),
    )
    result = {
        "session_id": str(sent.session.id),
        "turn_id": str(sent.turn.id) if sent.turn is not None else "",
        "message_id": str(sent.message.id),
    }
    return {"result": result, "updates": sent.updates}


class _CompactParams(_SessionParams):
    custom_instruction = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, max_length=4000
    )


@rpc("v1.session.compact")
@replies(action("SessionCompact", success=success(), queued=serializers.BooleanField()))
def session_compact(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """Queue a compaction of the session's context: ``{success, queued}``, ``updates`` empty
    (the ``summary`` message arrives on the topic when the worker has written it)."""
    from apps.turns.compaction import request_compaction

    p = validate(_CompactParams, params)
    session = selectors.session_get(user_id=ctx.user_id, session_id=p["session_id"])
    queued = request_compaction(session, p.get("custom_instruction") or "")
    return {"result": {"success": True, "queued": queued}, "updates": []}
