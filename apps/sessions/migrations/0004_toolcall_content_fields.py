"""Tool call messages in the original's shape (api.yaml ``ToolCall``), with their links.

``toolcall_input`` data ``{id, name, arguments}`` becomes ``{id, tool_name, input}``;
``toolcall_output`` data ``{id, name, output, status}`` becomes ``{id, tool_name, input, output,
status}`` with ``parent_message`` set to its ``toolcall_input`` message, and each RTC gets its
``output_message``. The call message of a result is the one whose engine key differs only in
``:call:`` for ``:result:``, or else (fork copies, which carry no key) the closest earlier
``toolcall_input`` of the session with the same tool call id.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def _call_message(Message: Any, m: Any) -> Any:
    if m.parent_message_id:
        return Message.objects.filter(pk=m.parent_message_id).first()
    if m.client_id.startswith("turn:") and ":result:" in m.client_id:
        key = m.client_id.replace(":result:", ":call:", 1)
        found = Message.objects.filter(user_id=m.user_id, client_id=key).first()
        if found is not None:
            return found
    return (
        Message.objects.filter(
            session_id=m.session_id,
            content__type="toolcall_input",
            content__data__id=(m.content.get("data") or {}).get("id", ""),
            global_offset__lt=m.global_offset,
        )
        .order_by("-global_offset")
        .first()
    )


def forward(apps: Any, schema_editor: Any) -> None:
    Message = apps.get_model("agent_sessions", "Message")
    Rtc = apps.get_model("rtc", "Rtc")
    for m in Message.objects.filter(content__type="toolcall_input").iterator():
        d = m.content.get("data") or {}
        if "tool_name" in d:
            continue
        m.content = {"type": "toolcall_input", "data": {
            "id": d.get("id", ""), "tool_name": d.get("name", ""),
            "input": d.get("arguments", "{}"),
        }}
        m.save(update_fields=["content"])
    for m in Message.objects.filter(content__type="toolcall_output").iterator():
        d = m.content.get("data") or {}
        if "tool_name" in d and m.parent_message_id:
            continue
        call = _call_message(Message, m)
        call_data = (call.content.get("data") or {}) if call is not None else {}
        m.content = {"type": "toolcall_output", "data": {
            "id": d.get("id", ""), "tool_name": d.get("tool_name", d.get("name", "")),
            "input": d.get("input", call_data.get("input", "{}")),
            "output": d.get("output", ""), "status": d.get("status", ""),
        }}
        m.parent_message = call
        m.save(update_fields=["content", "parent_message"])
    for rtc in Rtc.objects.filter(output_message__isnull=True, message__isnull=False).iterator():
        out = Message.objects.filter(
            parent_message_id=rtc.message_id, content__type="toolcall_output"
        ).first()
        if out is not None:
            Rtc.objects.filter(pk=rtc.pk).update(output_message=out)


def backward(apps: Any, schema_editor: Any) -> None:
    Message = apps.get_model("agent_sessions", "Message")
    for m in Message.objects.filter(content__type__in=["toolcall_input", "toolcall_output"]):
        d = m.content.get("data") or {}
        if "tool_name" not in d:
            continue
        old = {"id": d.get("id", ""), "name": d["tool_name"]}
        if m.content["type"] == "toolcall_input":
            old["arguments"] = d.get("input", "{}")
        else:
            old.update(output=d.get("output", ""), status=d.get("status", ""))
        m.content = {"type": m.content["type"], "data": old}
        m.save(update_fields=["content"])


class Migration(migrations.Migration):
    dependencies = [
        ("agent_sessions", "0003_session_host_functions"),
        ("rtc", "0001_initial"),
    ]

    operations = [migrations.RunPython(forward, backward)]
