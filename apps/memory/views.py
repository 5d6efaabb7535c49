"""The owner-only HTTP API of memories (Bearer token, like every ``/api/`` view).

* ``GET /api/memories?q=&category=&importance=&cursor=&limit=`` → ``{items, next_cursor}``
* ``PATCH /api/memories/<id>`` ``{content?, category?, importance?}`` → the item
* ``DELETE /api/memories/<id>`` → 204
* ``GET /api/memories/export`` → every memory of the user's, as a JSON file
* ``GET /api/sessions/<session_id>/memories`` → ``{items}``: the session's memory entries

A memory or session of another user answers 404 exactly as one that does not exist. Bad input
answers 400 ``{code, message, details}`` and changes nothing (``rtcagent.api_errors``).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from rtcagent.errors import InvalidRequest, NotFound

from . import selectors, services
from .serializers import (
    ListParams,
    MemoryOut,
    MemoryPageOut,
    MemoryPatch,
    SessionMemoriesOut,
    session_memory_to_dict,
    user_memory_to_dict,
)

MAX_ID = 2**63 - 1  # a bigint: larger numbers are no memory's (and must not reach the database)


def _memory_id(raw: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) <= MAX_ID:
        raise NotFound("memory", raw[:40])
    return int(raw)


def _valid(serializer: Any) -> dict[str, Any]:
    if not serializer.is_valid():
        raise InvalidRequest("invalid input", details=serializer.errors)
    return serializer.validated_data


class MemoryListView(APIView):
    @extend_schema(parameters=[ListParams], responses={200: MemoryPageOut}, tags=["memory"])
    def get(self, request: Request) -> Response:
        p = _valid(ListParams(data=request.query_params))
        page = selectors.user_memory_page(
            user_id=request.user.id, q=p["q"], category=p.get("category"),
            importance=p.get("importance"), session_id=p.get("session_id"),
            cursor=p.get("cursor") or None, limit=p["limit"],
        )
        return Response({"items": [user_memory_to_dict(m) for m in page.items],
                         "next_cursor": page.next_cursor})


class MemoryDetailView(APIView):
    @extend_schema(request=MemoryPatch, responses={200: MemoryOut}, tags=["memory"])
    def patch(self, request: Request, memory_id: str) -> Response:
        pk = _memory_id(memory_id)
        try:
            body = request.data
        except ParseError as exc:
            raise InvalidRequest(str(exc.detail)) from None
        fields = _valid(MemoryPatch(data=body))
        memory = services.user_memory_update(user_id=request.user.id, memory_id=pk, **fields)
        return Response(user_memory_to_dict(memory))

    @extend_schema(responses={204: None}, tags=["memory"])
    def delete(self, request: Request, memory_id: str) -> Response:
        services.user_memory_delete(user_id=request.user.id, memory_id=_memory_id(memory_id))
        return Response(status=204)


class MemoryExportView(APIView):
    @extend_schema(responses={200: OpenApiResponse(OpenApiTypes.OBJECT,
                                                   description="a JSON file")},
                   tags=["memory"])
    def get(self, request: Request) -> HttpResponse:
        data = {"exported_at": timezone.now().isoformat(),
                **selectors.user_memory_export(request.user.id)}
        response = HttpResponse(orjson.dumps(data, option=orjson.OPT_INDENT_2),
                                content_type="application/json")
        name = f"memories-{timezone.now().date().isoformat()}.json"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        response["Cache-Control"] = "no-store"  # personal data: not for shared caches
        return response


class SessionMemoriesView(APIView):
    @extend_schema(responses={200: SessionMemoriesOut}, tags=["memory"])
    def get(self, request: Request, session_id: str) -> Response:
        try:
            sid = uuid.UUID(session_id)
        except ValueError:
            raise NotFound("session", session_id[:40]) from None
        rows = selectors.session_memories_of(user_id=request.user.id, session_id=sid)
        return Response({"items": [session_memory_to_dict(m) for m in rows]})


__all__ = ["MemoryDetailView", "MemoryExportView", "MemoryListView", "SessionMemoriesView"]
