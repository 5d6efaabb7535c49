"""The wire contract, checked end to end: every RPC method's reply and every topic publication of
a real scenario (Daphne, two workers, the scripted model, the official client) against the
schemas the code renders with (``apps.gateway.wire``), strictly: unknown or missing fields and
wrong JSON types fail. Also the fields api.yaml defines that the code must fill (tool call
content, ``success``, ``parent_message_id`` / ``output_message_id``, ``agent_prompt``)."""

from __future__ import annotations

import asyncio
import copy
import json
import urllib.request
import uuid
from collections import Counter
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from apps.accounts.tokens import issue_access_token
from apps.gateway import wire
from apps.gateway.registry import get_handler, methods
from apps.rtc.serializers import RtcSerializer
from apps.sessions.serializers import MessageSerializer, SessionSerializer
from tests.gateway.conftest import gateway  # noqa: F401 - fixture
from tests.turns.conftest import pool  # noqa: F401 - fixture
from tests.turns.stack import Browser

pytestmark = [pytest.mark.django_db(transaction=True)]

WRITE_ARGS = {"path": "/notes.md", "content": "# Notes\n"}


class Wire:
    """RPCs through the tab, each reply checked against its method's reply schema."""

    def __init__(self, tab: Browser) -> None:
        self.tab = tab
        self.called: Counter[str] = Counter()

    async def __call__(self, method: str, data: dict[str, Any]) -> dict[str, Any]:
        reply = await self.tab.rpc(method, data)
        wire.check(get_handler(method).reply_schema, reply, method)
        self.called[method] += 1
        return reply

    async def send(self, text: str, session_id: str = "", **extra: Any) -> dict[str, Any]:
        return await self("v1.message.send", {
            "content_data": {"type": "user_message", "data": {"text": text}},
            "client_id": str(uuid.uuid4()), "client_session_id": "cs-" + uuid.uuid4().hex[:8],
            "server_session_id": session_id, **extra,
        })


def _script(model: Any) -> None:
    model.add_rule({"last_user_contains": "take a note"}, {
        "reasoning": "A file, then a check.", "content": "Writing it down.",
        "tool_calls": [{"id": "call_w", "name": "write", "arguments": WRITE_ARGS},
                       {"id": "call_x", "name": "noSuchTool", "arguments": {}}]})
    model.add_rule({"last_tool_result_contains": "unknown tool"}, {"content": "Noted."})
    model.add_rule({"last_user_contains": "remove it"}, {"tool_calls": [
        {"id": "call_d", "name": "write", "arguments": {"path": "/notes.md", "content": ""}}]})
    model.add_rule({"last_tool_result_contains": "[Tool Rejected]"}, {"content": "Kept it."})
    model.add_rule({"last_user_contains": "ask me"}, {"tool_calls": [
        {"name": "askUser", "arguments": {"questions": [
            {"question": "Which?", "header": "Pick",
             "options": [{"label": "A"}, {"label": "B"}]}]}}]})
    model.add_rule({"last_user_contains": "please fail"},
                   {"error": {"status": 401, "message": "Incorrect API key provided"}})
    model.add_rule({"last_user_contains": "Use these sections"}, {"content": "A note was taken."})
    model.add_rule({"last_user_contains": "delegate it"}, {"tool_calls": [
        {"name": "subAgent", "arguments": {"title": "Helper", "mode": "async",
                                           "instruction": "TASK-HELP: take your time"}}]})
    model.add_rule({"last_user_contains": "TASK-HELP"},
                   {"content": "helping", "chunk_size": 1, "chunk_delay": 0.5})
    model.add_rule({"last_role": "user"}, {"content": "ok"})


def _http_result(server: Any, user: Any, rtc_id: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1
        f"{server.http_url}/api/rtc/{rtc_id}/result", data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {issue_access_token(user)}",
                 "Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return json.loads(response.read())


async def test_every_reply_and_update_matches_its_schema(gateway, pool, model, make_user) -> None:  # noqa: F811
    _script(model)
    user = await sync_to_async(make_user)()
    async with Browser(gateway, user) as tab:
        call = Wire(tab)

        # A turn with reasoning, an answer, a browser tool call and a refused one.
        sent = await call.send("take a note", agent_prompt="Be brief.")
        sid = sent["result"]["session_id"]
        turn_id = sent["result"]["turn_id"]  # created with the message: nothing ahead of it
        rtc = await tab.pending_rtc(sid)
        assert rtc["turn_id"] == turn_id
        await tab.turn_status(sid, "interrupted")
        for status in ("sent", "executing", "executing"):  # the repeat is a success, no Update
            reply = await call("v1.rtc.update_status", {"rtc_id": rtc["id"], "status": status})
            assert reply["result"]["success"] is True
        assert reply["updates"] == [] and reply["result"]["rtc"]["status"] == "executing"
        done = await call("v1.rtc.submit_result", {"rtc_id": rtc["id"], "success": True,
                                                   "result": "wrote 8 bytes", "client_id": "r-1"})
        again = await call("v1.rtc.submit_result", {"rtc_id": rtc["id"], "success": True,
                                                    "result": "wrote 8 bytes", "client_id": "r-1"})
        assert done["result"]["success"] is again["result"]["success"] is True
        assert (done["result"]["duplicate"], again["result"]["duplicate"]) == (False, True)
        twin = await asyncio.to_thread(_http_result, gateway, user, rtc["id"],
                                       {"success": True, "result": "x", "client_id": "r-1"})
        wire.check(get_handler("v1.rtc.submit_result").reply_schema, twin, "HTTP twin")
        assert twin["result"]["duplicate"] is True
        await tab.turn_status(sid, "completed")

        # The original's tool call shape, linked both ways.
        (call_in, refused_in) = await tab.until(lambda: tab.messages(sid, "toolcall_input"))
        outputs = await tab.until(lambda: len(tab.messages(sid, "toolcall_output")) == 2
                                  and tab.messages(sid, "toolcall_output"))
        assert call_in["content"]["data"]["tool_name"] == "write"
        assert json.loads(call_in["content"]["data"]["input"]) == WRITE_ARGS
        assert refused_in["content"]["data"] == {
            "id": "call_x", "tool_name": "noSuchTool", "input": "{}"}
        out, refused_out = outputs
        assert out["content"]["data"] == {**call_in["content"]["data"],
                                          "output": "wrote 8 bytes", "status": "completed"}
        assert refused_out["content"]["data"] == {
            **refused_in["content"]["data"], "output": "[Tool Error] unknown tool 'noSuchTool'",
            "status": "error"}
        assert (out["parent_message_id"], refused_out["parent_message_id"]) == (
            call_in["id"], refused_in["id"])
        got = (await call("v1.rtc.get", {"rtc_id": rtc["id"]}))["item"]
        assert (got["message_id"], got["output_message_id"]) == (call_in["id"], out["id"])
        assert next(r for r in tab.rtcs(sid) if r["id"] == rtc["id"])["output_message_id"] \
            == out["id"]
        assert [m["content"]["type"] for m in tab.messages(sid)][:3] == [
            "user_message", "thinking", "markdown"]

        # agent_prompt is a snapshot of the creating send.
        await call("v1.message.send", {
            "content_data": {"type": "text", "data": "plain text, ignore the prompt"},
            "client_id": str(uuid.uuid4()), "server_session_id": sid,
            "agent_prompt": "Be verbose."})
        await tab.until(lambda: len([t for t in tab.turns(sid) if t["status"] == "completed"]) == 2)
        session = (await call("v1.session.get", {"session_id": sid}))["item"]
        assert session["agent_prompt"] == "Be brief."

        # A rejection in manual mode, a stop while waiting on the browser, a failed turn.
        await call.send("remove it", sid, work_mode="manual")
        risky = await tab.until(lambda: next(
            (r for r in tab.rtcs(sid, "pending") if r["needs_approval"]), None))
        reply = await call("v1.rtc.update_status", {
            "rtc_id": risky["id"], "status": "rejected", "reason": "keep my notes"})
        assert reply["result"]["success"] is True and reply["result"]["rtc"]["status"] == "rejected"
        await tab.until(lambda: len([t for t in tab.turns(sid) if t["status"] == "completed"]) == 3)
        await call.send("ask me", sid)
        await tab.until(lambda: next(
            (r for r in tab.rtcs(sid, "pending") if r["tool_name"] == "askUser"), None))
        await tab.turn_status(sid, "interrupted")
        stopped = await call("v1.turn.stop", {"session_id": sid, "client_id": "s-1"})
        assert stopped["result"]["success"] is True and stopped["result"]["status"] == "cancelled"
        idle = await call("v1.turn.stop", {"session_id": sid})
        assert idle["result"] == {"success": True, "turn_id": "", "status": ""}
        await call.send("please fail", sid)
        await tab.turn_status(sid, "failed")
        await tab.until(lambda: tab.messages(sid, "error"))

        # Compaction, queries, session actions, a fork and a soft delete.
        compact = await call("v1.session.compact", {"session_id": sid})
        assert compact["result"]["success"] is True
        await tab.until(lambda: tab.messages(sid, "summary"), within=20)
        await call("v1.session.list", {"limit": 5})
        listed = await call("v1.message.list", {"session_id": sid, "limit": 200})
        assert listed["next_cursor"] is None
        await call("v1.message.get", {"message_id": out["id"]})
        turns = await call("v1.turn.list", {"session_id": sid})
        await call("v1.turn.get", {"turn_id": turns["items"][0]["id"]})
        await call("v1.rtc.list", {"session_id": sid})
        await call("v1.file.list", {"session_id": sid})
        # A sub-agent (apps.tasks.subagents): its children listed, then stopped.
        await call.send("delegate it", sid)
        child = await tab.until(lambda: next((s["id"] for s in tab.all("session")
                                              if s["parent_server_session_id"] == sid), None))
        await call("v1.session.list", {"parent_session_id": sid})
        stopped = await call("v1.subagent.stop", {"session_id": child})
        assert stopped["result"]["success"] is True
        # Goals and loops (apps.tasks): set, read and cancel; create, list and stop.
        goal = await call("v1.goal.set", {"session_id": sid, "condition": "notes are tidy",
                                          "max_rounds": 1})
        await call("v1.goal.get", {"session_id": sid})
        await call("v1.goal.cancel", {"session_id": sid})
        loop = await call("v1.loop.create", {"session_id": sid, "prompt": "any news?",
                                             "interval_seconds": 3600, "max_runs": 2})
        await call("v1.loop.list", {"session_id": sid})
        await call("v1.loop.stop", {"loop_id": loop["result"]["loop_id"]})
        # Live-call channels (apps.live): registered, listed, fed, removed.
        await call("v1.channel.register", {"name": "mic", "direction": "in",
                                           "realtime": True, "session_id": sid})
        await call("v1.channel.list", {})
        fed = await call("v1.channel.input", {"name": "mic", "text": "anyone there?"})
        assert fed["delivered"] is False  # no live call reads it
        await call("v1.channel.unregister", {"name": "mic"})
        assert goal["result"]["goal_id"]
        await tab.until(lambda: all(t["status"] in ("completed", "cancelled", "failed")
                                    for t in tab.turns(sid)), within=20)
        await call("v1.session.update", {"session_id": sid, "title": "Notes"})
        for method in ("v1.session.close", "v1.session.open"):
            assert (await call(method, {"session_id": sid}))["result"] == {"success": True}
        fork = await call("v1.session.fork", {
            "old_server_session_id": sid, "old_server_message_id": out["id"],
            "new_client_session_id": "fork-1", "new_client_message_id": str(uuid.uuid4()),
            "content_data": {"type": "user_message", "data": {"text": "again"}}})
        forked = fork["result"]["session_id"]
        await tab.until(lambda: any(t["status"] == "completed" for t in tab.turns(forked)))
        await call("v1.session.update", {"session_id": forked,
                                         "deleted_at": "2030-01-01T00:00:00Z"})

        assert set(call.called) == set(methods())
        seen: set[tuple[str, str]] = set()
        for n, pub in enumerate(tab.rec.publications[f"topic:u={user.id}"]):
            wire.check_publication(pub.data, f"publication {n}")
            seen |= {(it["entity"], it["action"]) for it in pub.data.get("items", [])}
        assert seen == {(e, a) for e in ("session", "turn", "message", "rtc", "goal", "loop")
                        for a in ("created", "updated")}
        kinds = {m["content"]["type"] for m in tab.all("message")}
        assert kinds == {"user_message", "text", "thinking", "markdown", "toolcall_input",
                         "toolcall_output", "error", "summary"}


async def test_the_checker_refuses_unknown_missing_and_mistyped_fields(
    make_user, monkeypatch: pytest.MonkeyPatch
) -> None:
    from apps.rtc.models import Rtc
    from apps.sessions.services import message_send
    from apps.turns import queue

    # The module's workers (``pool``, started by an earlier test) would take the message and
    # run its turn, which the RTC made below belongs to: not queued.
    monkeypatch.setattr(queue, "enqueue_message", lambda *args, **kwargs: None)

    def rows() -> tuple[dict, dict, dict]:
        user = make_user()
        sent = message_send(user_id=user.id, device_id="", client_id="c-1",
                            content={"type": "user_message", "data": {"text": "hi"}})
        turn = sent.turn  # created with the message (pending)
        rtc = Rtc.objects.create(session=sent.session, turn=turn, user=user, tool_call_id="c",
                                 tool_name="ls", parameters={})
        to_json = lambda d: json.loads(json.dumps(d))  # noqa: E731 - as a client decodes it
        return (to_json(wire.Update.render(sent.updates[0])),
                to_json(MessageSerializer.render(sent.message)),
                to_json(RtcSerializer.render(rtc)))

    update, message, rtc = await sync_to_async(rows)()
    wire.check(wire.Update, update)
    wire.check(MessageSerializer, message)
    wire.check(RtcSerializer, rtc)
    session = update["data_list"][0]
    wire.check(SessionSerializer, session)

    def broken(value: dict, change: Any) -> dict:
        value = copy.deepcopy(value)
        change(value)
        return value

    refused = [
        (SessionSerializer, broken(session, lambda s: s.update(extra=1)), "unknown field"),
        (SessionSerializer, broken(session, lambda s: s.pop("title")), "missing field title"),
        (SessionSerializer, broken(session, lambda s: s.update(total_tokens="5")), "integer"),
        (SessionSerializer, broken(session, lambda s: s.update(owner_ref_id=1)), "string"),
        (SessionSerializer, broken(session, lambda s: s.update(status="busy")), "one of"),
        (SessionSerializer, broken(session, lambda s: s.update(created_at="2030-01-01")), "UTC"),
        (SessionSerializer, broken(session, lambda s: s.update(closed_at=0)), "UTC"),
        (SessionSerializer, broken(session, lambda s: s.update(root_server_session_id=None)),
         "null"),
        (MessageSerializer, broken(message, lambda m: m.update(session_id="x")), "UUID"),
        (MessageSerializer, broken(message, lambda m: m["content"].update(kind=1)),
         "unknown field"),
        (MessageSerializer, broken(message, lambda m: m.update(content={
            "type": "toolcall_input", "data": {"id": "c", "name": "ls", "arguments": "{}"}})),
         "unknown field"),
        (MessageSerializer, broken(message, lambda m: m.update(content={
            "type": "toolcall_output", "data": {"id": "c", "tool_name": "ls", "input": "{}"}})),
         "missing field output"),
        (RtcSerializer, broken(rtc, lambda r: r.update(needs_approval=0)), "boolean"),
        (RtcSerializer, broken(rtc, lambda r: r.update(parameters=[])), "object"),
        (wire.Update, broken(update, lambda u: u["data_list"].pop()), "equal length"),
        (wire.Update, broken(update, lambda u: u["data_list"][1].pop("role")), "missing field"),
        (wire.Update, broken(update, lambda u: u["items"][0].update(entity="folder")), "one of"),
    ]
    for schema, value, problem in refused:
        with pytest.raises(wire.WireError, match=problem):
            wire.check(schema, value)


async def test_file_updates_match_their_schema(gateway, pool, model, make_user) -> None:  # noqa: F811
    """The ``file`` entity (apps.attachments): one ready image, one skipped file, each published
    once as ``file`` created and checked strictly; then the checker's refusals for it."""
    from apps.attachments.serializers import FileSerializer
    from apps.storage.store import get_store
    from tests.attachments import samples

    model.add_rule({"last_role": "user"}, {"content": "ok"})
    user = await sync_to_async(make_user)()
    store = get_store()
    image_key, pdf_key = f"user-{user.id}/a.png", f"user-{user.id}/b.pdf"
    await asyncio.to_thread(store.put, image_key,
                            samples.encode(samples.halves((64, 32)), "PNG"))
    await asyncio.to_thread(store.put, pdf_key, samples.PDF)
    async with Browser(gateway, user) as tab:
        call = Wire(tab)
        files = [{"fileid": image_key, "mimetype": "image/png", "extra": {"name": "a.png"}},
                 {"fileid": pdf_key, "mimetype": "application/pdf", "extra": {"name": "b.pdf"}}]
        sent = await call("v1.message.send", {
            "content_data": {"type": "user_message", "data": {"text": "see", "files": files}},
            "client_id": str(uuid.uuid4())})
        await tab.turn_status(sent["result"]["session_id"], "completed")
        ready, skipped = await tab.until(
            lambda: len(tab.all("file")) == 2 and sorted(tab.all("file"), key=lambda f: f["name"]))
        for n, pub in enumerate(tab.rec.publications[f"topic:u={user.id}"]):
            wire.check_publication(pub.data, f"publication {n}")
        file_items = [(it["entity"], it["action"]) for u in tab.updates for it in u["items"]
                      if it["entity"] == "file"]
        assert file_items == [("file", "created")] * 2
    assert (ready["status"], ready["thumbnail_url"]) == (
        "ready", f"/api/files/{ready['id']}/thumbnail")
    assert (skipped["status"], skipped["thumbnail_url"], skipped["width"]) == ("skipped", "", 0)

    def broken(change: Any) -> dict:
        value = copy.deepcopy(ready)
        change(value)
        return value

    for value, problem in [
        (broken(lambda f: f.update(extra=1)), "unknown field"),
        (broken(lambda f: f.pop("thumbnail_url")), "missing field thumbnail_url"),
        (broken(lambda f: f.update(width="64")), "integer"),
        (broken(lambda f: f.update(size=-1)), "integer >= 0"),
        (broken(lambda f: f.update(kind="video")), "one of"),
        (broken(lambda f: f.update(status="failed")), "one of"),
        (broken(lambda f: f.update(message_id="")), "UUID"),
        (broken(lambda f: f.update(created_at=None)), "null"),
    ]:
        with pytest.raises(wire.WireError, match=problem):
            wire.check(FileSerializer, value)
