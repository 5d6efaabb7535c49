"""RPC namespace ``v1.file.*``: the attachments the server processed (``file`` entities).

A client that reloads a session (its topic could not be recovered) gets them here, as it gets
messages from ``v1.message.list``; new ones arrive as ``file`` Updates.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.gateway.params import validate
from apps.gateway.registry import RpcContext, rpc
from apps.gateway.wire import page, replies

from . import selectors
from .serializers import FileSerializer


class _ListParams(serializers.Serializer):
    session_id = serializers.UUIDField()
    cursor = serializers.CharField(required=False, allow_blank=True, allow_null=True)
    limit = serializers.IntegerField(required=False, allow_null=True, min_value=1)


@rpc("v1.file.list")
@replies(page(FileSerializer, serializers.CharField(allow_blank=True)))
def file_list(ctx: RpcContext, params: dict[str, Any]) -> dict[str, Any]:
    """The ``file`` entities of one of the caller's sessions, oldest first."""
    p = validate(_ListParams, params)
    found = selectors.attachment_list(
        user_id=ctx.user_id, session_id=p["session_id"], cursor=p.get("cursor"),
        limit=p.get("limit"),
    )
    return {"items": found.items, "next_cursor": found.next_cursor}
