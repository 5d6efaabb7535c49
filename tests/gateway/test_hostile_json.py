"""Breaks 5 and 8 of the hardening issue: JSON that could be accepted but never stored or sent
back out (deep nesting, NUL characters) is refused at the edge with a permanent error, before
anything is stored, and the user's connections keep working."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from apps.accounts.tokens import issue_access_token
from apps.gateway.models import TopicEvent
from apps.sessions.models import Message, Session
from tests.gateway.test_frames import _connected, _recv_lines

pytestmark = [pytest.mark.django_db(transaction=True)]


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def _send_params(data: Any) -> dict[str, Any]:
    return {
        "method": "v1.message.send",
        "data": {
            "content_data": {"type": "user_message", "data": data},
            "client_id": str(uuid.uuid4()),
            "client_session_id": "cs-" + uuid.uuid4().hex[:8],
        },
    }


def _stored(user_id: int) -> tuple[int, int, int]:
    return (
        Message.objects.filter(user_id=user_id).count(),
        Session.objects.filter(user_id=user_id).count(),
        TopicEvent.objects.filter(user_id=user_id).count(),
    )


@pytest.mark.parametrize(
    ("label", "data"),
    [
        ("nested 100", _nested(100)),
        ("nested 300", _nested(300)),  # orjson reads it, but could never write it back
        ("NUL in text", {"text": "before\x00after"}),
        ("NUL in a key", {"te\x00xt": "hi"}),
    ],
)
async def test_unstorable_json_is_refused_once_and_the_socket_lives_on(
    gateway, make_user, label: str, data: Any
) -> None:
    user = await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    await ws.send(json.dumps({"id": 2, "rpc": _send_params(data)}))
    (reply,) = await _recv_lines(ws)
    assert reply["id"] == 2, label
    assert reply["error"]["code"] == 400
    assert reply["error"]["message"].startswith("invalid_request: params")
    assert "temporary" not in reply["error"], "a permanent error: the widget must not retry"
    assert await sync_to_async(_stored)(user.id) == (0, 0, 0)
    # the same socket still answers, and a new one connects and recovers normally
    await ws.send(json.dumps({"id": 3, "rpc": {"method": "v1.session.list", "data": {}}}))
    (listing,) = await _recv_lines(ws)
    assert listing["id"] == 3 and listing["rpc"]["data"]["items"] == []
    await ws.close()
    again = await _connected(gateway.ws_url, issue_access_token(user))
    await again.close()


async def test_a_frame_nested_past_the_decoder_limit_closes_as_bad_request(
    gateway, make_user
) -> None:
    from tests.gateway.test_frames import _closed_with

    user = await sync_to_async(make_user)()
    ws = await _connected(gateway.ws_url, issue_access_token(user))
    await ws.send('{"id":2,"rpc":{"method":"v1.session.list","data":' + "[" * 2000 + "]" * 2000
                  + "}}")
    code, pushes = await _closed_with(ws)
    assert code == 3501
    assert pushes[-1]["push"]["disconnect"] == {"code": 3501, "reason": "bad request: invalid JSON"}
    assert await sync_to_async(_stored)(user.id) == (0, 0, 0)
