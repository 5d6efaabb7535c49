"""Migration 0004: tool call messages stored in the old shape move to api.yaml's ``ToolCall``."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from apps.rtc.models import Rtc
from apps.sessions.models import Message, MessageRole
from tests.sessions.factories import make_message, make_rtc, make_session, make_turn

pytestmark = [pytest.mark.django_db]

migration = importlib.import_module("apps.sessions.migrations.0004_toolcall_content_fields")


def _old_pair(session, turn, call_id: str, *, keyed: bool) -> tuple[Message, Message]:
    key = f"turn:{turn.id}:1:%s:{call_id}" if keyed else ""
    call = make_message(
        session, role=MessageRole.ASSISTANT, turn=turn, client_id=key and key % "call",
        content={"type": "toolcall_input",
                 "data": {"id": call_id, "name": "read", "arguments": '{"path": "/a"}'}})
    out = make_message(
        session, role=MessageRole.TOOL, turn=turn, client_id=key and key % "result",
        content={"type": "toolcall_output",
                 "data": {"id": call_id, "name": "read", "output": "1\ta", "status": "completed"}})
    return call, out


def test_old_tool_call_messages_get_the_new_fields_and_links(make_user) -> None:
    user = make_user()
    session = make_session(user)
    turn = make_turn(session, status="completed")
    call, out = _old_pair(session, turn, "call_0", keyed=True)
    rtc = make_rtc(turn, tool_call_id="call_0", message=call, status="completed")
    copy_call, copy_out = _old_pair(session, turn, "call_0", keyed=False)  # a fork copy: no key

    migration.forward(apps, None)

    for c, o in ((call, out), (copy_call, copy_out)):
        c.refresh_from_db()
        o.refresh_from_db()
        assert c.content["data"] == {"id": "call_0", "tool_name": "read", "input": '{"path": "/a"}'}
        assert o.content["data"] == {"id": "call_0", "tool_name": "read", "input": '{"path": "/a"}',
                                     "output": "1\ta", "status": "completed"}
        assert o.parent_message_id == c.id
    assert Rtc.objects.get(pk=rtc.pk).output_message_id == out.id

    migration.forward(apps, None)  # again: nothing changes
    out.refresh_from_db()
    assert out.parent_message_id == call.id and out.content["data"]["input"] == '{"path": "/a"}'
    migration.backward(apps, None)
    call.refresh_from_db()
    assert call.content["data"] == {"id": "call_0", "name": "read", "arguments": '{"path": "/a"}'}
