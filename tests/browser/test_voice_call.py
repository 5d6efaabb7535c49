"""The widget's voice plugin (issue 15, deliverable 8): the composer's phone button starts a live
call, the scripted agent answers it with an ``rt_children`` create naming the call's channels,
and the realtime child then talks through the call panel. Daphne, a worker and the scripted model
are real; headless Chromium refuses speech recognition, so the typed path carries the first
test, and the second replaces the browser's speech APIs with recording stubs (the server stays
real) to check what is spoken, what recognition sends and when speech stops."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import expose_tokens, integration_html, send, serve_page, wait_connected
from tests.browser.test_integration_look import AXE, _serious

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PAGE = integration_html("""import { createRtcAgent } from '/static/rtc-agent/rtc-agent.js';
    window.calls = [];
    const log = (name) => (d) => window.calls.push([name, d]);
    const a = createRtcAgent({ auth: { getToken: () => window.rtcTestToken(900) },
      on: { callStarted: log('started'), callConnected: log('connected'),
            callEnded: log('ended') } });
    document.body.append(a);
    a.setAttribute('open', '');
    window.agent = a;""")
STORY = "Once upon a time a fox lived by the river. " * 14
HANDED_BACK = "Its transcript holds"

# Recording stand-ins for the browser's speech APIs: utterances "play" until cancel(), and
# `__hear(text, final)` is what recognition would report.
SPEECH_STUBS = """
window.__spoken = []; window.__cancels = 0; window.__recs = 0;
const synth = { speaking: false, pending: false,
  speak(u) { window.__spoken.push(u.text); this.speaking = true; },
  cancel() { window.__cancels++; this.speaking = false; } };
Object.defineProperty(window, 'speechSynthesis', { value: synth, configurable: true });
window.SpeechSynthesisUtterance = class { constructor(text) { this.text = text; this.lang = ''; } };
class FakeRecognition {
  constructor() { window.__recs++; }
  start() { window.__rec = this; setTimeout(() => this.onstart && this.onstart(), 0); }
  abort() { if (window.__rec === this) window.__rec = null; }
  stop() { this.abort(); }
}
window.SpeechRecognition = FakeRecognition;
window.webkitSpeechRecognition = FakeRecognition;
window.__hear = (text, isFinal) => {
  const result = Object.assign([{ transcript: text, confidence: 0.9 }], { isFinal });
  window.__rec.onresult({ resultIndex: 0, results: [result] });
};
"""


def _until(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll (the database, the scripted model) until ``check()`` is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _open(ipage: Any, user: Any, names: tuple[str, str]) -> None:
    """The integrator's page, connected, with the call's channel names fixed for the script."""
    expose_tokens(ipage, user)
    serve_page(ipage, PAGE)
    wait_connected(ipage)
    ipage.evaluate("""([input, output]) => {
        window.agent.agent.voice.channelNames = () => ({ input, output }); }""", list(names))


def _script_the_agent(model: Any, names: tuple[str, str]) -> None:
    """The parent answers the announcement by creating the rtchild on the named channels."""
    model.add_rule({"last_user_contains": "Voice call started"}, {"tool_calls": [
        {"name": "rt_children", "arguments": {
            "action": "create", "inputch": names[0], "outputch": names[1], "title": "Voice",
            "instruction": "Answer the caller briefly."}}]}, times=1)
    model.add_rule({"last_tool_result_contains": "rtchild created"},
                   {"content": "I picked up the call."})
    model.add_rule({"last_user_contains": HANDED_BACK}, {"content": "The call is over."})


def _said_to_model(model: Any, text: str) -> list[Any]:
    """The recorded requests whose last user message is ``text``."""
    found = []
    for request in model.requests:
        users = [m for m in request.body.get("messages", []) if m.get("role") == "user"]
        if users and text in str(users[-1].get("content")):
            found.append(request)
    return found


def _say(ipage: Any, text: str) -> None:
    ipage.fill("rtc-call-panel input[name=say]", text)
    ipage.keyboard.press("Enter")


def _agent_line(ipage: Any, text: str) -> Any:
    return ipage.locator("rtc-call-panel .line.agent", has_text=text)


def test_typed_call_connects_answers_is_interrupted_and_hangs_up(
        ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    from apps.live.models import Channel, LiveCall, LiveStatus
    from apps.sessions.models import Message

    names = ("voice-in-typed", "voice-out-typed")
    _script_the_agent(model, names)
    model.add_rule({"last_user_contains": "what time is it"},
                   {"content": "It is noon in Lisbon.", "chunk_size": 4, "chunk_delay": 0.02})
    model.add_rule({"last_user_contains": "tell me a long story"},
                   {"content": STORY, "chunk_size": 6, "chunk_delay": 0.15})
    model.add_rule({"last_user_contains": "just the weather"}, {"content": "Sunny and warm."})
    _open(ipage, web_user, names)

    # No conversation open: the announcement starts one; the channels are not bound to it.
    ipage.click("rtc-composer [data-act=call]")
    status = ipage.locator("rtc-call-panel [part=call-status]")
    expect(status).to_have_text("Connected", timeout=20000)
    expect(ipage.locator("rtc-composer [data-act=call]")).to_be_disabled()
    channels = {c.name: c for c in Channel.objects.filter(user=web_user)}
    assert sorted(channels) == sorted(names)
    assert (channels[names[0]].direction, channels[names[1]].direction) == ("in", "out")
    assert all(c.realtime and c.session_id is None for c in channels.values())
    call = LiveCall.objects.get(user=web_user)
    assert (call.input_channel, call.output_channel, call.status) == (*names, LiveStatus.RUNNING)
    parent_id = str(call.parent_session_id)
    assert ipage.evaluate("window.agent.agent.store.state.currentSession") == parent_id
    expect(ipage.locator("rtc-message-list .user", has_text="Voice call started")).to_contain_text(
        f"Input channel: {names[0]}, output channel: {names[1]}")
    # Headless Chromium refuses the microphone: the panel says so and typing is the way.
    expect(ipage.locator("rtc-call-panel .notice")).to_have_text(
        "The microphone is not allowed here: type what you want to say.")
    expect(ipage.locator("rtc-call-panel [data-act=mic]")).to_be_hidden()
    assert ipage.evaluate("""() => { let a = document.activeElement;
        while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
        return a && a.name; }""") == "say"

    # Typed input reaches the rtchild; its answer streams into the transcript.
    _say(ipage, "what time is it?")
    expect(ipage.locator("rtc-call-panel .line.you").last).to_have_text("You:what time is it?")
    answer = _agent_line(ipage, "It is noon in Lisbon.")
    expect(answer).to_have_attribute("data-final", "true", timeout=20000)
    (asked,) = _said_to_model(model, "what time is it?")
    assert any("Answer the caller briefly." in str(m.get("content"))
               for m in asked.body["messages"] if m.get("role") == "system")
    expect(ipage.locator("rtc-call-panel [part=call-interrupted]")).to_be_hidden()

    # A slow answer, cut by the next input: the mark shows, the cut answer stays marked, the
    # new input gets its own answer, and the model's stream of the old one was closed.
    _say(ipage, "tell me a long story")
    story = _agent_line(ipage, "Once upon a time")
    expect(story).to_have_attribute("data-final", "false", timeout=20000)
    _say(ipage, "stop, just the weather")
    expect(ipage.locator("rtc-call-panel [part=call-interrupted]")).to_be_visible()
    expect(ipage.locator("rtc-call-panel [part=call-interrupted]")).to_have_text(
        "Interrupted: the agent stopped to listen")
    expect(_agent_line(ipage, "Sunny and warm.")).to_have_attribute("data-final", "true",
                                                                   timeout=20000)
    expect(story).to_have_attribute("data-interrupted", "")
    expect(story).to_contain_text("(cut off)")
    expect(story).to_have_attribute("data-final", "true")  # the server ended it, cut
    assert len(story.inner_text()) < len(STORY)
    outcomes = _until(lambda: [r.outcome for r in _said_to_model(model, "tell me a long story")
                               if r.done.is_set()], "the cut request to end")
    assert outcomes == ["client_closed"]
    transcript = ipage.locator("rtc-call-panel .line").all_inner_texts()
    assert [line.split(":", 1)[0] for line in transcript] == [
        "You", "Agent", "You", "Agent", "You", "Agent"]

    # A tool in the browser: the runtime's hold line first, then the answer after the tool,
    # each its own line of the transcript (one turn, two answers).
    model.add_rule({"last_user_contains": "list my files"}, {"tool_calls": [
        {"id": "t1", "name": "ls", "arguments": {"path": "/"}}]}, times=1)
    model.add_rule({"last_role": "tool"}, {"content": "You have no files yet."}, times=1)
    _say(ipage, "list my files")
    expect(_agent_line(ipage, "One moment.")).to_have_attribute("data-final", "true",
                                                               timeout=20000)
    expect(_agent_line(ipage, "You have no files yet.")).to_have_attribute(
        "data-final", "true", timeout=20000)

    # The panel on a phone, and axe on the call in progress.
    ipage.set_viewport_size({"width": 360, "height": 740})
    for part in ("call-panel", "hang-up", "call-input"):
        box = ipage.locator(f"rtc-call-panel [part={part}]").bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 360, part
    assert ipage.locator("rtc-composer textarea").bounding_box()["width"] > 200
    if AXE.exists():
        assert _serious(ipage) == []
    ipage.set_viewport_size({"width": 1280, "height": 800})

    # Hang up: both channels go, the call stops, the parent is handed the call and answers.
    ipage.click("rtc-call-panel [part=hang-up]")
    expect(status).to_have_text("Call ended", timeout=20000)
    assert not Channel.objects.filter(user=web_user).exists()
    call.refresh_from_db()
    assert call.status == LiveStatus.STOPPED
    handover = _until(lambda: Message.objects.filter(
        session_id=parent_id, content__data__origin__kind="live").first(), "the hand-over")
    assert handover.content["data"]["origin"]["id"] == str(call.id)
    expect(ipage.locator("rtc-message-list [part=message-origin]")).to_have_text(
        "☎ Voice call: handed back to the agent", timeout=20000)
    expect(ipage.locator("rtc-message-list .md").last).to_have_text("The call is over.",
                                                                    timeout=20000)
    expect(ipage.locator("rtc-call-panel input[name=say]")).to_be_disabled()
    expect(ipage.locator("rtc-composer [data-act=call]")).to_be_enabled()
    events = ipage.evaluate("window.calls")
    assert [name for name, _ in events] == ["started", "connected", "ended"]
    assert events[0][1] == {"inputChannel": names[0], "outputChannel": names[1], "sessionId": None}
    assert events[1][1]["liveCallId"] == str(call.id)
    assert events[2][1]["stopped"] == [str(call.id)]
    assert events[2][1]["sessionId"] == parent_id
    ipage.click("rtc-call-panel [data-act=dismiss]")
    expect(ipage.locator("rtc-call-panel")).to_be_hidden()
    assert ipage.errors == []


def test_spoken_call_in_an_open_conversation(ipage: Any, web: Any, worker: Any, model: Any,
                                             web_user: Any) -> None:
    from apps.live.models import Channel, LiveCall, LiveStatus

    names = ("voice-in-spoken", "voice-out-spoken")
    _script_the_agent(model, names)
    model.add_rule({"last_user_contains": "hello there"}, {"content": "Hello."})
    model.add_rule({"last_user_contains": "what is the weather"},
                   {"content": "Sunny. Warm too. Bring a hat", "chunk_size": 4})
    model.add_rule({"last_user_contains": "tell me about foxes"},
                   {"content": STORY, "chunk_size": 6, "chunk_delay": 0.15})
    model.add_rule({"last_user_contains": "stop please"}, {"content": "Stopped."})
    ipage.add_init_script(SPEECH_STUBS)
    _open(ipage, web_user, names)
    send(ipage, "hello there")
    expect(ipage.locator("rtc-message-list .md").last).to_have_text("Hello.", timeout=20000)
    sid = ipage.evaluate("window.agent.agent.store.state.currentSession")

    # In an open conversation the channels are bound to it.
    ipage.click("rtc-composer [data-act=call]")
    expect(ipage.locator("rtc-call-panel [part=call-status]")).to_have_text("Connected",
                                                                            timeout=20000)
    assert {str(c.session_id) for c in Channel.objects.filter(user=web_user)} == {sid}
    assert str(LiveCall.objects.get(user=web_user).parent_session_id) == sid
    expect(ipage.locator("rtc-call-panel .hint")).to_be_hidden()  # recognition is there
    mic = ipage.locator("rtc-call-panel [data-act=mic]")
    expect(mic).to_have_attribute("aria-pressed", "false")
    _until(lambda: ipage.evaluate("!!window.__rec"), "recognition to start")

    # What recognition hears shows as it comes; a final result is said on the call, and the
    # answer is spoken sentence by sentence.
    ipage.evaluate("window.__hear('what is the', false)")
    expect(ipage.locator("rtc-call-panel [part=call-interim]")).to_have_text("what is the…")
    ipage.evaluate("window.__hear('what is the weather', true)")
    expect(_agent_line(ipage, "Bring a hat")).to_have_attribute("data-final", "true",
                                                               timeout=20000)
    expect(ipage.locator("rtc-call-panel [part=call-interim]")).to_be_hidden()
    assert _said_to_model(model, "what is the weather")
    assert ipage.evaluate("window.__spoken") == ["Sunny.", "Warm too.", "Bring a hat"]

    # While a long answer is spoken: its own words coming back through the microphone are not
    # an input; the user's are, and the voice stops at once, for good for that answer.
    ipage.evaluate("window.__hear('tell me about foxes', true)")
    _until(lambda: len(ipage.evaluate("window.__spoken")) >= 5, "the story to be spoken")
    ipage.evaluate("window.__hear('a fox lived by the river', true)")
    cancels = ipage.evaluate("window.__cancels")
    ipage.evaluate("window.__hear('stop please', true)")
    expect(ipage.locator("rtc-call-panel [part=call-interrupted]")).to_be_visible()
    assert ipage.evaluate("window.__cancels") > cancels
    expect(_agent_line(ipage, "Stopped.")).to_have_attribute("data-final", "true", timeout=20000)
    said = ipage.locator("rtc-call-panel .line.you").all_inner_texts()
    assert said == ["You:what is the weather", "You:tell me about foxes", "You:stop please"]
    spoken = ipage.evaluate("window.__spoken")
    assert spoken[-1] == "Stopped."
    sentence = STORY.split(". ")[0] + "."
    assert spoken[3:-1] and all(s == sentence for s in spoken[3:-1])
    # the server ends the cut answer (interrupted): nothing more of it is spoken
    story = _agent_line(ipage, "Once upon a time")
    expect(story).to_have_attribute("data-final", "true", timeout=20000)
    expect(story).to_have_attribute("data-interrupted", "")
    assert ipage.evaluate("window.__spoken") == spoken

    # The panel's words follow the page's language, in place.
    ipage.evaluate("window.agent.lang = 'zh-CN'")
    expect(ipage.locator("rtc-call-panel [part=call-status]")).to_have_text("已接通")
    expect(ipage.locator("rtc-call-panel [part=hang-up]")).to_have_text("挂断")
    expect(ipage.locator("rtc-call-panel .line.you").last).to_have_text("你:stop please")
    ipage.evaluate("window.agent.lang = 'en-US'")
    expect(ipage.locator("rtc-call-panel [part=call-status]")).to_have_text("Connected")

    # Mute stops listening; unmuted it listens again. Hanging up stops both.
    mic.click()
    expect(mic).to_have_attribute("aria-pressed", "true")
    assert ipage.evaluate("window.__rec") is None
    mic.click()
    _until(lambda: ipage.evaluate("!!window.__rec"), "recognition to start again")
    ipage.click("rtc-call-panel [part=hang-up]")
    expect(ipage.locator("rtc-call-panel [part=call-status]")).to_have_text("Call ended",
                                                                            timeout=20000)
    assert ipage.evaluate("window.__rec") is None
    assert LiveCall.objects.get(user=web_user).status == LiveStatus.STOPPED
    assert ipage.errors == []


def test_a_call_left_on_the_line_is_handed_back_by_the_next_start(
        ipage: Any, web: Any, worker: Any, model: Any, web_user: Any) -> None:
    from apps.live.models import Channel, LiveCall, LiveStatus
    from apps.sessions.models import Message

    names = ("voice-in-left", "voice-out-left")
    _script_the_agent(model, names)
    _open(ipage, web_user, names)
    ipage.click("rtc-composer [data-act=call]")
    expect(ipage.locator("rtc-call-panel [part=call-status]")).to_have_text("Connected",
                                                                            timeout=20000)
    call = LiveCall.objects.get(user=web_user)

    # The page drops the widget mid-call (its socket closes with it): the call stays on the line.
    ipage.evaluate("window.agent.destroy()")
    assert Channel.objects.filter(user=web_user).count() == 2
    call.refresh_from_db()
    assert call.status == LiveStatus.RUNNING

    # The next widget of this browser hangs it up when it starts; the agent gets it back.
    ipage.evaluate("""() => {
        const a = window.RtcAgent.createRtcAgent({
          auth: { getToken: () => window.rtcTestToken(900) } });
        document.body.append(a);
        a.setAttribute('open', '');
        window.agent = a; }""")
    wait_connected(ipage)
    _until(lambda: not Channel.objects.filter(user=web_user).exists(), "the channels to go")
    call.refresh_from_db()
    assert call.status == LiveStatus.STOPPED
    _until(lambda: Message.objects.filter(session_id=call.parent_session_id,
                                          content__data__origin__kind="live").exists(),
           "the hand-over")
    expect(ipage.locator("rtc-call-panel")).to_be_hidden()
    assert ipage.evaluate("""() => Object.keys(localStorage)
        .filter((k) => k.endsWith(':voice-calls'))
        .map((k) => JSON.parse(localStorage.getItem(k)).length)""") == [0]
    assert ipage.errors == []
