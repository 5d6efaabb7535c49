"""``v1.channel.*`` through the RPC registry and the ``rt_children`` / ``rt_transcript`` tools as
the worker runs them: the design note's create errors, list, stop and its hand-over, transcript
paging, the prompt window that never splits a call from its result, and ownership everywhere."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apps.gateway import wire
from apps.gateway.registry import get_handler
from apps.live import services
from apps.live.models import Channel, LiveCall
from apps.live.ports import window
from apps.sessions.models import Message, Session
from apps.turns import server_tools
from apps.turns.models import Turn
from apps.turns.server_tools import ToolContext
from rtcagent.errors import InvalidRequest, InvalidState, NotFound, RateLimited
from tests.sessions.factories import call, make_session

pytestmark = pytest.mark.django_db


def rpc(method: str, user: Any, params: dict[str, Any]) -> dict[str, Any]:
    reply = call(method, user, params)
    wire.check(get_handler(method).reply_schema, reply, method)
    return reply


def register(user: Any, name: str, direction: str, realtime: bool = True, **more: Any) -> Any:
    return rpc("v1.channel.register", user, {"name": name, "direction": direction,
                                             "realtime": realtime, **more})


def tool(name: str, session: Session, args: dict[str, Any]) -> str:
    ctx = ToolContext(user_id=session.user_id, session_id=str(session.id), turn_id="")
    out = server_tools.run(name, ctx, args)
    assert isinstance(out, str)
    return out


def create(session: Session, **args: Any) -> str:
    return tool("rt_children", session, {"action": "create", **args})


@pytest.fixture
def parent(make_user: Any) -> Session:
    user = make_user()
    register(user, "mic", "in")
    register(user, "speaker", "out")
    return make_session(user)


# --- channels ---------------------------------------------------------------------------------


def test_register_list_reregister_and_unregister(make_user: Any) -> None:
    user = make_user()
    session = make_session(user)
    reply = register(user, "mic", "in", session_id=str(session.id))
    assert reply["channel"] == {**reply["channel"], "name": "mic", "direction": "in",
                                "realtime": True, "session_id": str(session.id)}
    again = register(user, "mic", "in")  # idempotent; now usable from any session
    assert again["channel"]["session_id"] is None
    assert Channel.objects.filter(user=user).count() == 1
    register(user, "speaker", "out", realtime=False)
    assert [c["name"] for c in rpc("v1.channel.list", user, {})["items"]] == ["mic", "speaker"]
    assert rpc("v1.channel.unregister", user, {"name": "mic"}) == {"unregistered": True,
                                                                  "stopped": []}
    assert [c["name"] for c in rpc("v1.channel.list", user, {})["items"]] == ["speaker"]


@pytest.mark.parametrize("params, needle", [
    ({"name": "", "direction": "in"}, "name"),
    ({"name": "has space", "direction": "in"}, "name"),
    ({"name": "x" * 65, "direction": "in"}, "name"),
    ({"name": "mic", "direction": "sideways"}, "direction"),
    ({"name": "mic"}, "direction"),
])
def test_bad_registrations_are_refused_and_store_nothing(make_user: Any, params: Any,
                                                         needle: str) -> None:
    user = make_user()
    with pytest.raises(InvalidRequest, match=needle):
        call("v1.channel.register", user, params)
    assert not Channel.objects.filter(user=user).exists()


def test_channels_are_the_callers_own(make_user: Any) -> None:
    alice, bob = make_user(), make_user()
    register(alice, "mic", "in")
    with pytest.raises(NotFound):
        call("v1.channel.unregister", bob, {"name": "mic"})
    with pytest.raises(NotFound):
        call("v1.channel.input", bob, {"name": "mic", "text": "hi"})
    with pytest.raises(NotFound):  # another user's session cannot be bound
        call("v1.channel.register", bob, {"name": "mine", "direction": "in",
                                          "session_id": str(make_session(alice).id)})
    register(bob, "mic", "out")  # names are per user: Bob's "mic" is his own
    assert Channel.objects.get(user=alice, name="mic").direction == "in"
    assert rpc("v1.channel.list", bob, {})["items"][0]["direction"] == "out"


def test_channel_count_is_capped(make_user: Any, settings: Any) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "LIVE_MAX_CHANNELS": 2}
    user = make_user()
    register(user, "a", "in")
    register(user, "b", "out")
    with pytest.raises(RateLimited):
        register(user, "c", "in")
    register(user, "a", "in")  # re-registering is not a new channel


def test_input_without_a_call_is_not_delivered_and_input_needs_an_input_channel(
        parent: Session) -> None:
    user = parent.user
    assert rpc("v1.channel.input", user, {"name": "mic", "text": "hello?"}) == {
        "delivered": False, "live_call_id": None, "message_id": None, "interrupted": False}
    with pytest.raises(InvalidRequest, match="output channel"):
        call("v1.channel.input", user, {"name": "speaker", "text": "hi"})
    with pytest.raises(InvalidRequest, match="blank"):
        call("v1.channel.input", user, {"name": "mic", "text": "   "})
    with pytest.raises(InvalidRequest, match="8000"):
        call("v1.channel.input", user, {"name": "mic", "text": "x" * 8001})
    assert not Message.objects.filter(user=user).exists()


# --- rt_children create: the design note's errors ----------------------------------------------


def test_create_errors_name_the_real_cause(parent: Session) -> None:
    user = parent.user
    register(user, "plain-in", "in", realtime=False)
    register(user, "plain-out", "out", realtime=False)
    other = make_session(user)
    register(user, "elsewhere", "in", session_id=str(other.id))
    cases = [
        ({"inputch": "mic"}, "cannot carry an rt stream"),  # one side only
        ({"outputch": "speaker"}, "cannot carry an rt stream"),
        ({"inputch": "plain-in", "outputch": "speaker"}, "cannot carry an rt stream"),
        ({"inputch": "mic", "outputch": "plain-out"}, "not declared realtime"),
        ({"inputch": "speaker", "outputch": "mic"}, "swapped"),
        ({"inputch": "nope", "outputch": "speaker"}, "unknown channel 'nope'"),
        ({"inputch": "elsewhere", "outputch": "speaker"}, "unknown channel 'elsewhere'"),
        ({"inputch": "mic", "outputch": "mic"}, "two different channels"),
    ]
    for args, needle in cases:
        out = create(parent, **args)
        assert out.startswith("[Tool Error]") and needle in out, (args, out)
    assert not LiveCall.objects.exists()
    assert Session.objects.filter(user=user).count() == 2  # no child session was made


def test_create_list_verify_and_a_taken_channel(parent: Session) -> None:
    out = create(parent, inputch="mic", outputch="speaker", title="Support line")
    assert out.startswith("rtchild created")
    live = LiveCall.objects.get()
    assert str(live.id) in out and live.session.parent_session_id == parent.id
    assert live.session.root_session_id == parent.id
    again = create(parent, inputch="mic", outputch="speaker")
    assert "already used by live call" in again
    listed = json.loads(tool("rt_children", parent, {"action": "list"}))
    assert listed == [{**listed[0], "id": str(live.id), "title": "Support line",
                       "status": "running", "state": "idle", "turns": 0, "messages": 0,
                       "inputch": "mic", "outputch": "speaker"}]
    delivered = rpc("v1.channel.input", parent.user, {"name": "mic", "text": "hi there"})
    assert delivered["delivered"] is True and delivered["live_call_id"] == str(live.id)
    # the input became the call's message; its turn starts in a worker (none runs here)
    msg = Message.objects.get(pk=delivered["message_id"])
    assert msg.session_id == live.session_id
    assert msg.content["data"] == {"text": "hi there", "origin": {
        "kind": "live", "id": str(live.id), "channel": "mic"}}
    # an rtchild cannot start calls of its own
    nested = create(live.session, inputch="mic", outputch="speaker")
    assert "cannot start live calls" in nested


def test_calls_are_capped_per_user(parent: Session, settings: Any) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "LIVE_MAX_CALLS": 1}
    register(parent.user, "mic2", "in")
    register(parent.user, "speaker2", "out")
    assert create(parent, inputch="mic", outputch="speaker").startswith("rtchild created")
    assert "at most 1 live calls" in create(parent, inputch="mic2", outputch="speaker2")


def test_changing_a_channel_in_use_is_refused(parent: Session) -> None:
    create(parent, inputch="mic", outputch="speaker")
    with pytest.raises(InvalidState, match="used by live call"):
        register(parent.user, "mic", "in", realtime=False)
    register(parent.user, "mic", "in")  # the same declaration again is fine


def test_inputs_are_rate_limited_per_call(parent: Session, settings: Any) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "LIVE_INPUTS_PER_MINUTE": 2}
    create(parent, inputch="mic", outputch="speaker")
    for text in ("one", "two"):
        assert rpc("v1.channel.input", parent.user, {"name": "mic", "text": text})["delivered"]
    with pytest.raises(RateLimited):
        call("v1.channel.input", parent.user, {"name": "mic", "text": "three"})


def test_a_repeated_input_is_delivered_once(parent: Session) -> None:
    create(parent, inputch="mic", outputch="speaker")
    first = rpc("v1.channel.input", parent.user, {"name": "mic", "text": "hi", "client_id": "k1"})
    again = rpc("v1.channel.input", parent.user, {"name": "mic", "text": "hi", "client_id": "k1"})
    assert again["message_id"] == first["message_id"]
    assert Message.objects.filter(session_id=LiveCall.objects.get().session_id).count() == 1


# --- stop, hand-over, transcript --------------------------------------------------------------


def _say_and_answer(live: LiveCall, pairs: list[tuple[str, str]]) -> None:
    """Stored turns of the call: each input and the agent's answer."""
    from apps.sessions.services import session_allocate_offsets

    for n, (heard, said) in enumerate(pairs):
        turn = Turn.objects.create(session=live.session, user_id=live.user_id,
                                   status="completed")
        for role, ctype, data, key in (("user", "user_message", {"text": heard}, "in"),
                                       ("assistant", "markdown", said, "0:markdown")):
            Message.objects.create(
                session=live.session, user_id=live.user_id, turn=turn,
                client_id=f"turn:{turn.id}:{key}:{n}" if role == "assistant" else f"t{n}{key}",
                global_offset=session_allocate_offsets(session_id=live.session_id),
                role=role, content={"type": ctype, "data": data})


def test_stop_hands_the_call_back_with_its_size_and_transcript_pages(parent: Session) -> None:
    create(parent, inputch="mic", outputch="speaker", title="Call")
    live = LiveCall.objects.get()
    _say_and_answer(live, [(f"question {n}", f"answer {n}") for n in range(3)])
    out = tool("rt_children", parent, {"action": "stop", "id": str(live.id)})
    assert "holds 6 messages" in out and f'rt_transcript(id="{live.id}"' in out
    live.refresh_from_db()
    assert live.status == "stopped" and live.session.status == "closed"
    # the parent asked: no hand-over message on top of the tool's result
    assert not Message.objects.filter(session=parent, client_id__startswith="live:").exists()
    assert "already stopped" in tool("rt_children", parent, {"action": "stop",
                                                             "id": str(live.id)})
    page = tool("rt_transcript", parent, {"id": str(live.id), "offset": 0, "limit": 4})
    assert page.splitlines() == [
        f"Messages 0 to 3 of 6 (live call {live.id}, stopped):",
        "[0] caller: question 0", "[1] agent: answer 0",
        "[2] caller: question 1", "[3] agent: answer 1", "(more: offset=4)"]
    rest = tool("rt_transcript", parent, {"id": str(live.id), "offset": 4})
    assert rest.splitlines()[1:] == ["[4] caller: question 2", "[5] agent: answer 2"]
    assert "holds 6" in tool("rt_transcript", parent, {"id": str(live.id), "offset": 9})
    assert "[Tool Error]" in tool("rt_transcript", parent, {"id": str(live.id), "limit": 500})
    # the input channel is free again: the call can be recreated
    assert create(parent, inputch="mic", outputch="speaker").startswith("rtchild created")


def test_stop_of_an_empty_call_says_there_is_nothing_to_hand_over(parent: Session) -> None:
    create(parent, inputch="mic", outputch="speaker")
    live = LiveCall.objects.get()
    out = tool("rt_children", parent, {"action": "stop", "id": str(live.id)})
    assert "no context to hand over" in out and "Do not call rt_transcript" in out


def test_calls_and_transcripts_are_only_the_creating_sessions(parent: Session,
                                                               make_user: Any) -> None:
    create(parent, inputch="mic", outputch="speaker")
    live = LiveCall.objects.get()
    sibling = make_session(parent.user)
    stranger = make_session(make_user())
    for session in (sibling, stranger):
        for name, args in (("rt_transcript", {"id": str(live.id)}),
                           ("rt_children", {"action": "stop", "id": str(live.id)})):
            assert "unknown live call" in tool(name, session, args)
        assert tool("rt_children", session, {"action": "list"}) == "No live calls in this session."
    assert "unknown live call" in tool("rt_transcript", parent, {"id": "not-a-uuid"})
    assert LiveCall.objects.get().status == "running"


def test_unregistering_a_channel_stops_its_call_and_tells_the_parent(parent: Session) -> None:
    create(parent, inputch="mic", outputch="speaker", title="Hotline")
    live = LiveCall.objects.get()
    out = rpc("v1.channel.unregister", parent.user, {"name": "speaker"})
    assert out["stopped"] == [str(live.id)]
    told = Message.objects.get(session=parent, client_id=f"live:{live.id}:ended")
    assert told.content["data"]["origin"] == {"kind": "live", "id": str(live.id),
                                              "title": "Hotline", "status": "stopped"}
    assert "no context to hand over" in told.content["data"]["text"]
    assert services.call_stop(live, reason="again", notify=True) is False  # once
    assert Message.objects.filter(session=parent, client_id__startswith="live:").count() == 1


# --- the window -------------------------------------------------------------------------------


def _answer_with_tools(n: int) -> list[dict[str, Any]]:
    calls = [{"id": f"c{n}{k}", "type": "function",
              "function": {"name": "read", "arguments": "{}"}} for k in range(2)]
    return [{"role": "assistant", "content": None, "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c["id"], "content": "x" * 40} for c in calls)]


def test_the_window_keeps_recent_whole_blocks_and_never_splits_a_pair() -> None:
    from apps.turns.engine import violations

    blocks: list[list[dict[str, Any]]] = []
    for n in range(30):
        blocks.append([{"role": "user", "content": f"input {n}"}])
        blocks.append(_answer_with_tools(n) if n % 2 else
                      [{"role": "assistant", "content": f"reply {n}"}])
    for most in range(1, 25):
        kept = window(blocks, most, 100_000)
        assert violations(kept) == [], most
        assert len(kept) <= max(most, 3)
        assert kept[-1] == blocks[-1][-1]  # the newest is always there
    # the token budget cuts too, and a single huge block is still kept whole
    assert len(window(blocks, 1000, 60)) < len(window(blocks, 1000, 100_000))
    huge = [[{"role": "user", "content": "word " * 5000}]]
    assert window(huge, 1, 10) == huge[0]


def test_a_call_whose_session_was_closed_takes_no_input_and_stops(parent: Session) -> None:
    create(parent, inputch="mic", outputch="speaker")
    live = LiveCall.objects.get()
    Session.objects.filter(pk=live.session_id).update(status="closed")  # e.g. a stopped tree
    out = rpc("v1.channel.input", parent.user, {"name": "mic", "text": "hello?"})
    assert out["delivered"] is False
    live.refresh_from_db()
    assert live.status == "stopped" and live.stop_reason == "its session was closed"
    assert Message.objects.filter(session=parent, client_id=f"live:{live.id}:ended").exists()


def test_the_rtchilds_prompt_is_a_window_of_whole_blocks(parent: Session, settings: Any
                                                         ) -> None:
    """The ports the worker uses for a call build the prompt from the stored conversation:
    the newest blocks within the window, each answer with all its results."""
    from apps.live.ports import LivePorts, ports_for
    from apps.sessions.services import session_allocate_offsets
    from apps.turns.engine import Checkpoint, violations
    from apps.turns.llm import OpenAIChat

    settings.RTCAGENT = {**settings.RTCAGENT, "LIVE_WINDOW_MESSAGES": 6}
    create(parent, inputch="mic", outputch="speaker", instruction="You are the front desk.")
    live = LiveCall.objects.get()

    def add(turn: Turn, key: str, role: str, ctype: str, data: Any, parent_msg: Any = None
            ) -> Message:
        return Message.objects.create(
            session=live.session, user_id=live.user_id, turn=turn, client_id=key,
            global_offset=session_allocate_offsets(session_id=live.session_id), role=role,
            content={"type": ctype, "data": data}, parent_message=parent_msg)

    for n in range(5):  # each turn: an input, an answer calling two tools, their results
        turn = Turn.objects.create(session=live.session, user_id=live.user_id,
                                   status="completed")
        trigger = add(turn, f"in{n}", "user", "user_message", {"text": f"input {n}"})
        Turn.objects.filter(pk=turn.pk).update(trigger_message=trigger)
        for k in range(2):
            call_id = f"c{n}{k}"
            data = {"id": call_id, "tool_name": "read", "input": "{}"}
            msg = add(turn, f"turn:{turn.id}:1:call:{call_id}", "assistant", "toolcall_input",
                      data)
            add(turn, f"turn:{turn.id}:1:result:{call_id}", "tool", "toolcall_output",
                {**data, "output": f"file {n}{k}", "status": "completed"}, msg)
    now = Turn.objects.create(session=live.session, user_id=live.user_id, status="running",
                              client_id=f"live:{live.id}:now")  # as its input's (the worker)
    trigger = add(now, "in-now", "user", "user_message", {"text": "and now?"})
    Turn.objects.filter(pk=now.pk).update(trigger_message=trigger)
    now.refresh_from_db()
    ports = ports_for(now, OpenAIChat(api_key="unused", base_url="http://127.0.0.1:9/v1"),
                      lambda: False)
    try:
        assert isinstance(ports, LivePorts)
        sent = ports.prompt(Checkpoint(), ports.tools())
    finally:
        ports.close()
    assert sent[0]["role"] == "system" and "You are the front desk." in sent[0]["content"]
    body = sent[1:]
    assert violations(body) == []
    # 6 messages at most, whole blocks: the last answer (3 messages), its input, the new input
    assert [m["role"] for m in body] == ["user", "assistant", "tool", "tool", "user"]
    assert body[0]["content"] == "input 4" and body[-1]["content"] == "and now?"
    # older messages left the prompt but not the store
    assert Message.objects.filter(session=live.session).count() == 5 * 5 + 1


def test_the_window_always_keeps_the_turns_own_input() -> None:
    """Mid-turn, a long answer of the turn must not push the turn's own input out."""
    blocks = [[{"role": "user", "content": "older"}],
              [{"role": "user", "content": "what is in the file?"}],
              [{"role": "assistant", "content": "word " * 3000}]]
    assert window(blocks, 40, 500)[0]["content"] == "word " * 3000  # keep=1: the answer only
    kept = window(blocks, 40, 500, keep=2)
    assert [m["content"] for m in kept][:1] == ["what is in the file?"] and len(kept) == 2



def test_a_request_sent_ahead_is_used_only_for_the_same_prompt_and_billed_when_unused(
        parent: Session, model: Any) -> None:
    """``apps.live.ports._Prefetch`` against the scripted model over HTTP."""
    from apps.live import ports
    from apps.turns.llm import OpenAIChat, TextDelta
    from apps.turns.models import LLMCall

    chat = OpenAIChat(api_key="sk-test-key", base_url=model.base_url, model="scripted-model")
    model.add_rule({"last_user_contains": "hello"}, {"content": "Hi there!"})
    sid = str(parent.id)
    prompt = [{"role": "system", "content": "live"}, {"role": "user", "content": "hello"}]
    ports._put_prefetch(sid, ports._Prefetch(chat, prompt, None, sid))
    fetch = ports._take_prefetch(sid, [*prompt], None)  # equal prompt: the early request
    assert fetch is not None
    events = list(fetch.consume(lambda: False, lambda abort: None))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hi there!"
    assert len(model.requests) == 1 and not LLMCall.objects.filter(purpose="prefetch").exists()

    ports._put_prefetch(sid, ports._Prefetch(chat, prompt, None, sid))
    other = [*prompt, {"role": "user", "content": "and more"}]
    assert ports._take_prefetch(sid, other, None) is None  # another prompt: closed, billed
    assert ports._take_prefetch(sid, prompt, None) is None  # and gone
    (bill,) = LLMCall.objects.filter(purpose="prefetch")
    assert bill.session_id == parent.id and bill.prompt_tokens > 0
    assert bill.completion_tokens == 0


def test_the_longest_client_id_is_stored_and_a_longer_one_refused(parent: Session) -> None:
    create(parent, inputch="mic", outputch="speaker")
    out = rpc("v1.channel.input", parent.user, {"name": "mic", "text": "hi",
                                                "client_id": "k" * 64})
    assert Message.objects.get(pk=out["message_id"]).client_id.endswith(":" + "k" * 64)
    with pytest.raises(InvalidRequest, match="client_id"):
        call("v1.channel.input", parent.user, {"name": "mic", "text": "hi",
                                               "client_id": "k" * 65})
