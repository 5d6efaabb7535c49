"""Token accounting: usage from the wire in, per-call records, totals, cost, the context fields
and their throttled publication out."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from openai.types import CompletionUsage

from apps.gateway.models import TopicEvent
from apps.ops.models import ModelPrice
from apps.sessions.models import Message, MessageRole, Session
from apps.sessions.serializers import session_to_dict
from apps.turns import accounting
from apps.turns.accounting import (
    SessionPublisher,
    context_fields,
    next_estimate,
    record_answer,
    set_context_tokens,
)
from apps.turns.llm import OpenAIChat, Usage, usage_from
from apps.turns.models import LLMCall, Turn
from rtcagent.devtools.scripted_llm import ScriptedLLM
from tests.sessions.factories import make_message, make_session, make_turn

pytestmark = pytest.mark.django_db

MODEL = "scripted-model"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def publisher(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> SessionPublisher:
    """The throttle on a clock of the test's (its deferred publications run on ``flush_due``)."""
    pub = SessionPublisher(interval=1.0, clock=clock, autostart=False)
    monkeypatch.setattr(accounting, "PUBLISHER", pub)
    return pub


@pytest.fixture
def record(django_capture_on_commit_callbacks: Any,
           publisher: SessionPublisher) -> Callable[..., None]:
    """``record_answer`` with its after-commit work run, as in production."""

    def run(**kwargs: Any) -> None:
        kwargs.setdefault("model", MODEL)
        kwargs.setdefault("prompt_estimate", 0)
        kwargs.setdefault("shared_prefix_ratio", None)
        kwargs.setdefault("message_id", None)
        with django_capture_on_commit_callbacks(execute=True):
            record_answer(**kwargs)

    return run


@pytest.fixture
def world(make_user: Any) -> tuple[Session, Turn]:
    session = make_session(make_user())
    return session, make_turn(session, status="running")


@pytest.fixture
def priced() -> ModelPrice:
    return ModelPrice.objects.create(
        model=MODEL, input_per_million=Decimal("2"), cached_input_per_million=Decimal("0.5"),
        cache_write_per_million=Decimal("2.5"), output_per_million=Decimal("8"),
        context_window=4000, max_output_tokens=1000, autocompact_buffer=1000,
    )


def session_updates(session: Session) -> list[dict[str, Any]]:
    """The session snapshots published on the owner's topic, in offset order."""
    out = []
    for row in TopicEvent.objects.filter(user_id=session.user_id, kind="update").order_by(
            "offset"):
        for it, data in zip(row.data["items"], row.data["data_list"], strict=True):
            if it["entity"] == "session" and it["entity_id"] == str(session.id):
                out.append(data)
    return out


def message_updates(msg: Message) -> list[dict[str, Any]]:
    out = []
    for row in TopicEvent.objects.filter(user_id=msg.user_id).order_by("offset"):
        for it, data in zip(row.data["items"], row.data["data_list"], strict=True):
            if it["entity"] == "message" and it["entity_id"] == str(msg.id):
                out.append(data)
    return out


def answer(session: Session, step: int) -> Message:
    return make_message(session, role=MessageRole.ASSISTANT,
                        content={"type": "markdown", "data": f"answer {step}"})


USAGE_FIELDS = ("total_input_tokens", "total_output_tokens", "total_tokens",
                "total_cached_read_tokens", "total_cached_write_tokens",
                "total_reasoning_tokens")
CONTEXT_FIELDS = ("current_context_tokens", "estimated_next_round_tokens",
                  "compression_threshold", "compression_progress", "rounds_until_compression")


def fields_of(session: Session, names: tuple[str, ...]) -> dict[str, Any]:
    session.refresh_from_db()
    return {name: getattr(session, name) for name in names}


# --- usage from the wire ---------------------------------------------------------------------

def stream_usage(server: ScriptedLLM, reply: dict[str, Any]) -> Usage:
    server.enqueue(reply)
    chat = OpenAIChat(api_key="sk-test-key", base_url=server.base_url, model=MODEL, timeout=5)
    (usage,) = [e for e in chat.stream([{"role": "user", "content": "hi"}], None)
                if isinstance(e, Usage)]
    return usage


def test_the_adapter_reads_reasoning_and_cache_writes_from_the_wire(model: ScriptedLLM) -> None:
    usage = stream_usage(model, {"reasoning": "hmm", "content": "ok", "usage": {
        "prompt_tokens": 1000, "completion_tokens": 50, "cached_tokens": 100,
        "cache_write_tokens": 800, "reasoning_tokens": 20}})
    assert usage == Usage(prompt_tokens=1000, completion_tokens=50, cached_tokens=100,
                          total_tokens=1050, reasoning_tokens=20, cache_write_tokens=800)
    details = model.wait_for_requests(1)[-1]  # the server records it after its last byte
    assert details.outcome == "completed"


@pytest.mark.parametrize(("raw", "cached", "written", "reasoning"), [
    # OpenAI: the official fields
    ({"prompt_tokens_details": {"cached_tokens": 30, "cache_write_tokens": 40},
      "completion_tokens_details": {"reasoning_tokens": 5}}, 30, 40, 5),
    # gateways in front of Anthropic-style caching (LiteLLM and others)
    ({"cache_read_input_tokens": 60, "cache_creation_input_tokens": 70}, 60, 70, 0),
    ({"prompt_tokens_details": {"cached_tokens": 10, "cache_creation_input_tokens": 20}},
     10, 20, 0),
    ({"prompt_tokens_details": {"cached_tokens": 0, "cache_creation_tokens": 25}}, 0, 25, 0),
    # DeepSeek
    ({"prompt_cache_hit_tokens": 90, "prompt_cache_miss_tokens": 10}, 90, 0, 0),
    # nothing reported; nulls where numbers belong
    ({"prompt_tokens_details": None, "completion_tokens_details": {"reasoning_tokens": None}},
     0, 0, 0),
])
def test_usage_is_read_under_the_names_providers_use(raw: dict[str, Any], cached: int,
                                                     written: int, reasoning: int) -> None:
    usage = usage_from(CompletionUsage.model_validate(
        {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110, **raw}))
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (100, 10, 110)
    assert (usage.cached_tokens, usage.cache_write_tokens, usage.reasoning_tokens) == (
        cached, written, reasoning)


def test_a_missing_total_is_prompt_plus_completion() -> None:
    usage = usage_from(CompletionUsage.model_construct(prompt_tokens=7, completion_tokens=3,
                                                       total_tokens=0))
    assert usage.total_tokens == 10


# --- a scripted conversation: usage in, session fields out -----------------------------------

def test_a_scripted_conversation_fills_every_figure(
    model: ScriptedLLM, record: Callable[..., None], world: tuple[Session, Turn],
    priced: ModelPrice, clock: Clock,
) -> None:
    session, turn = world
    replies = [
        {"reasoning": "plan", "tool_calls": [{"name": "read", "arguments": {"path": "/a"}}],
         "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "cache_write_tokens": 800,
                   "reasoning_tokens": 20}},
        {"content": "Read it.", "usage": {"prompt_tokens": 1300, "completion_tokens": 80,
                                          "cached_tokens": 1000}},
        {"content": "Done.", "usage": {"prompt_tokens": 1500, "completion_tokens": 100,
                                       "cached_tokens": 1200, "cache_write_tokens": 100,
                                       "reasoning_tokens": 30}},
    ]
    messages = []
    for step, reply in enumerate(replies):
        usage = stream_usage(model, reply)
        messages.append(answer(session, step))
        clock.now += 2  # a call every two seconds: each is published at once
        record(turn_id=turn.id, session_id=session.id, message_id=messages[-1].id, step=step,
               usage=usage, prompt_estimate=usage.prompt_tokens - 40,
               shared_prefix_ratio=[None, 0.9, 0.95][step])

    # per call: the provider's numbers and the price row's cost
    calls = list(LLMCall.objects.filter(turn=turn).order_by("step"))
    assert [(c.step, c.model, c.prompt_tokens, c.cached_tokens, c.cache_write_tokens,
             c.completion_tokens, c.reasoning_tokens, c.total_tokens) for c in calls] == [
        (0, MODEL, 1000, 0, 800, 50, 20, 1050),
        (1, MODEL, 1300, 1000, 0, 80, 0, 1380),
        (2, MODEL, 1500, 1200, 100, 100, 30, 1600),
    ]
    # 200*2 + 800*2.5 + 50*8 | 300*2 + 1000*0.5 + 80*8 | 200*2 + 1200*0.5 + 100*2.5 + 100*8
    assert [c.cost_usd for c in calls] == [Decimal("0.0028"), Decimal("0.00174"),
                                           Decimal("0.00205")]
    assert [c.shared_prefix_ratio for c in calls] == [None, 0.9, 0.95]
    assert [c.prompt_estimate for c in calls] == [960, 1260, 1460]
    assert [c.message_id for c in calls] == [m.id for m in messages]

    assert fields_of(session, USAGE_FIELDS) == {
        "total_input_tokens": 3800, "total_output_tokens": 230, "total_tokens": 4030,
        "total_cached_read_tokens": 2200, "total_cached_write_tokens": 900,
        "total_reasoning_tokens": 50,
    }
    assert session.total_cost_usd == pytest.approx(0.00659)
    # threshold 4000 - 1000. Growth: first the first completion (50), replaced by the first
    # measured growth (300), then the EWMA 0.3*200 + 0.7*300 = 270; (3000 - 1500) // 270 = 5
    assert fields_of(session, CONTEXT_FIELDS) == {
        "current_context_tokens": 1500, "estimated_next_round_tokens": 270,
        "compression_threshold": 3000, "compression_progress": 50.0,
        "rounds_until_compression": 5,
    }
    assert session.last_token_update_at is not None

    turn.refresh_from_db()
    assert (turn.input_tokens, turn.output_tokens, turn.total_tokens, turn.cached_tokens,
            turn.reasoning_tokens) == (3800, 230, 4030, 2200, 50)
    last = messages[-1]
    last.refresh_from_db()
    assert (last.input_tokens, last.output_tokens, last.total_tokens, last.cached_tokens,
            last.reasoning_tokens) == (1500, 100, 1600, 1200, 30)
    assert message_updates(last)[-1]["reasoning_tokens"] == 30

    # what clients saw: one session Update per call, the last one the figures above
    published = session_updates(session)
    assert [p["current_context_tokens"] for p in published] == [1000, 1300, 1500]
    assert [p["estimated_next_round_tokens"] for p in published] == [50, 300, 270]
    assert [p["rounds_until_compression"] for p in published] == [40, 5, 5]
    assert [p["compression_progress"] for p in published] == [33.33, 43.33, 50.0]
    assert published[-1]["total_cost_usd"] == pytest.approx(0.00659)
    assert published[-1]["total_cached_write_tokens"] == 900


def test_without_a_price_row_cost_stays_zero(record: Callable[..., None],
                                             world: tuple[Session, Turn]) -> None:
    session, turn = world
    record(turn_id=turn.id, session_id=session.id, step=0, model="unpriced",
           usage=Usage(prompt_tokens=10, completion_tokens=5, cached_tokens=0, total_tokens=15))
    assert LLMCall.objects.get().cost_usd is None
    session.refresh_from_db()
    assert (session.total_cost_usd, session.total_tokens) == (0.0, 15)
    # the defaults' threshold: 128000 - 13000
    assert session.compression_threshold == 115_000


def test_an_answer_without_usage_counts_its_prompt_estimate_only(
        record: Callable[..., None], world: tuple[Session, Turn], priced: ModelPrice) -> None:
    session, turn = world
    msg = answer(session, 0)
    record(turn_id=turn.id, session_id=session.id, message_id=msg.id, step=0, usage=None,
           prompt_estimate=900)
    call = LLMCall.objects.get()
    assert (call.usage_reported, call.prompt_tokens, call.prompt_estimate, call.cost_usd) == (
        False, 0, 900, None)
    assert fields_of(session, USAGE_FIELDS) == dict.fromkeys(USAGE_FIELDS, 0)
    assert session.total_cost_usd == 0.0
    assert session.current_context_tokens == 900
    assert session.compression_progress == 30.0
    msg.refresh_from_db()
    assert msg.input_tokens == 0 and message_updates(msg) == []


def usage(prompt: int, completion: int = 10) -> Usage:
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=0,
                 total_tokens=prompt + completion)


def test_the_context_fields_reach_minus_one_over_the_threshold(
        record: Callable[..., None], world: tuple[Session, Turn], priced: ModelPrice,
        clock: Clock) -> None:
    session, turn = world
    seen = []
    for step, prompt in enumerate((2000, 2900, 3000, 3600)):
        clock.now += 2
        record(turn_id=turn.id, session_id=session.id, step=step, usage=usage(prompt))
        session.refresh_from_db()
        seen.append((session.compression_progress, session.rounds_until_compression))
    # 2000/3000; 2900/3000 with 900 a round: no full round left; at and over the threshold: -1
    assert seen == [(66.67, 100), (96.67, 0), (100.0, -1), (100.0, -1)]
    assert session_updates(session)[-1]["rounds_until_compression"] == -1


def test_after_a_compaction_the_new_prompt_is_the_context(
        record: Callable[..., None], world: tuple[Session, Turn], priced: ModelPrice,
        clock: Clock, django_capture_on_commit_callbacks: Any) -> None:
    session, turn = world
    for step, prompt in enumerate((2000, 2900)):
        clock.now += 2
        record(turn_id=turn.id, session_id=session.id, step=step, usage=usage(prompt))
    clock.now += 2
    with django_capture_on_commit_callbacks(execute=True):
        set_context_tokens(session_id=session.id, tokens=1200)
    assert fields_of(session, CONTEXT_FIELDS) == {
        "current_context_tokens": 1200, "estimated_next_round_tokens": 900,
        "compression_threshold": 3000, "compression_progress": 40.0,
        "rounds_until_compression": 2,
    }
    assert session_updates(session)[-1]["current_context_tokens"] == 1200
    # the next call grows from the compacted prompt: 0.3*300 + 0.7*900 = 720
    clock.now += 2
    record(turn_id=turn.id, session_id=session.id, step=2, usage=usage(1500))
    assert fields_of(session, CONTEXT_FIELDS)["estimated_next_round_tokens"] == 720
    assert session.total_input_tokens == 2000 + 2900 + 1500  # the compaction added nothing
    with pytest.raises(ValueError):
        set_context_tokens(session_id=session.id, tokens=-1)


def test_a_summary_call_is_billed_without_moving_the_context(
        record: Callable[..., None], world: tuple[Session, Turn], priced: ModelPrice,
        clock: Clock) -> None:
    session, turn = world
    record(turn_id=turn.id, session_id=session.id, step=0, usage=usage(2000))
    before = fields_of(session, CONTEXT_FIELDS)
    clock.now += 2
    record(turn_id=turn.id, session_id=session.id, step=1, usage=usage(2800, 400),
           updates_context=False)
    assert fields_of(session, CONTEXT_FIELDS) == before
    assert session.total_input_tokens == 4800
    assert session.total_cost_usd == pytest.approx((2000 * 2 + 10 * 8 + 2800 * 2 + 400 * 8) / 1e6)


def test_the_ewma_of_growth() -> None:
    state = dict(previous=0, estimate=0)
    seen = []
    for current, completion in ((1000, 40), (1500, 60), (1600, 20), (1400, 30), (2400, 50)):
        state["estimate"] = next_estimate(
            previous=state["previous"], current=current, estimate=state["estimate"],
            completion_tokens=completion, seeded=len(seen) == 1)
        state["previous"] = current
        seen.append(state["estimate"])
    # seed 40; growth 500 replaces it; 0.3*100 + 0.7*500 = 380; shrink: kept; 0.3*1000 + 0.7*380
    assert seen == [40, 500, 380, 380, 566]


def test_context_fields_edges() -> None:
    assert context_fields(current=0, estimate=0, threshold=100) == {
        "current_context_tokens": 0, "estimated_next_round_tokens": 0,
        "compression_threshold": 100, "compression_progress": 0.0,
        "rounds_until_compression": 100}  # no estimate yet: one token a round
    assert context_fields(current=1, estimate=1, threshold=3)["compression_progress"] == 33.33
    assert context_fields(current=5, estimate=1, threshold=0)["rounds_until_compression"] == -1


# --- refusals --------------------------------------------------------------------------------

def test_a_turn_of_another_session_is_refused_and_nothing_is_written(
        record: Callable[..., None], world: tuple[Session, Turn], make_user: Any) -> None:
    session, _ = world
    other_turn = make_turn(make_session(make_user()), status="running")
    before = fields_of(session, USAGE_FIELDS + CONTEXT_FIELDS)
    for u in (usage(100), None):
        with pytest.raises(LookupError):
            record(turn_id=other_turn.id, session_id=session.id, step=0, usage=u)
    assert not LLMCall.objects.exists()
    assert fields_of(session, USAGE_FIELDS + CONTEXT_FIELDS) == before
    other_turn.refresh_from_db()
    assert other_turn.input_tokens == 0
    assert not TopicEvent.objects.exists()


def test_a_message_of_another_session_is_not_touched(
        record: Callable[..., None], world: tuple[Session, Turn], make_user: Any) -> None:
    session, turn = world
    stranger = answer(make_session(make_user()), 0)
    for message_id in (stranger.id, "not-a-uuid", stranger):  # an id, junk, the row itself
        record(turn_id=turn.id, session_id=session.id, message_id=message_id, step=0,
               usage=usage(100))
    stranger.refresh_from_db()
    assert stranger.input_tokens == 0 and message_updates(stranger) == []
    assert list(LLMCall.objects.values_list("message_id", flat=True)) == [None, None, None]


def test_the_message_is_published_once_per_change(
        record: Callable[..., None], world: tuple[Session, Turn]) -> None:
    session, turn = world
    msg = answer(session, 0)
    for message in (msg, msg.id):  # the runner passes its row, other callers the id
        record(turn_id=turn.id, session_id=session.id, message_id=message, step=0,
               usage=usage(100))
    (published,) = message_updates(msg)  # the second call found the same values
    assert (published["input_tokens"], published["output_tokens"]) == (100, 10)
    msg.refresh_from_db()
    assert (msg.input_tokens, msg.output_tokens) == (100, 10)
    assert LLMCall.objects.filter(message=msg).count() == 2


def test_the_session_published_at_once_is_the_row_as_stored(
        record: Callable[..., None], world: tuple[Session, Turn], priced: ModelPrice) -> None:
    session, turn = world
    record(turn_id=turn.id, session_id=session.id, step=0, usage=usage(1000))
    (published,) = session_updates(session)
    session.refresh_from_db()
    assert published == session_to_dict(session)  # totals, cost, context, updated_at
    assert published["total_input_tokens"] == 1000 and published["total_cost_usd"] > 0


def test_bad_prefix_ratios_are_clamped_or_dropped(
        record: Callable[..., None], world: tuple[Session, Turn]) -> None:
    session, turn = world
    for step, ratio in enumerate((1.5, -0.1, float("nan"))):
        record(turn_id=turn.id, session_id=session.id, step=step, usage=usage(100),
               shared_prefix_ratio=ratio)
    ratios = LLMCall.objects.order_by("step").values_list("shared_prefix_ratio", flat=True)
    assert list(ratios) == [1.0, 0.0, None]


# --- throttled publication -------------------------------------------------------------------

def test_answers_within_a_second_publish_once_then_the_last_values_follow(
        record: Callable[..., None], world: tuple[Session, Turn], priced: ModelPrice,
        publisher: SessionPublisher, clock: Clock) -> None:
    session, turn = world
    for step, prompt in enumerate((1000, 1100, 1200, 1300)):
        record(turn_id=turn.id, session_id=session.id, step=step, usage=usage(prompt))
        clock.now += 0.2
    # the first at once; three more within the second: coalesced
    assert [p["current_context_tokens"] for p in session_updates(session)] == [1000]
    assert publisher.pending() == [str(session.id)]
    assert publisher.flush_due() == 0  # 0.8 s after the first: not due yet
    clock.now += 0.2
    assert publisher.flush_due() == 1
    published = session_updates(session)
    assert [p["current_context_tokens"] for p in published] == [1000, 1300]
    assert published[-1]["total_input_tokens"] == 4600
    assert publisher.pending() == [] and publisher.flush_due() == 0

    # within the second after that publication: deferred again, then delivered
    clock.now += 0.5
    record(turn_id=turn.id, session_id=session.id, step=4, usage=usage(1400))
    assert len(session_updates(session)) == 2
    clock.now += 0.5
    assert publisher.flush_due() == 1
    assert [p["current_context_tokens"] for p in session_updates(session)] == [1000, 1300, 1400]
    # a second later the next answer publishes at once
    clock.now += 1
    record(turn_id=turn.id, session_id=session.id, step=5, usage=usage(1500))
    assert len(session_updates(session)) == 4 and publisher.pending() == []


def test_sessions_are_throttled_apart(record: Callable[..., None], world: tuple[Session, Turn],
                                      make_user: Any) -> None:
    session, turn = world
    other = make_session(make_user())
    other_turn = make_turn(other, status="running")
    record(turn_id=turn.id, session_id=session.id, step=0, usage=usage(100))
    record(turn_id=other_turn.id, session_id=other.id, step=0, usage=usage(200))
    assert len(session_updates(session)) == 1 and len(session_updates(other)) == 1


def test_a_deleted_session_is_not_published(
        record: Callable[..., None], world: tuple[Session, Turn],
        publisher: SessionPublisher, clock: Clock) -> None:
    session, turn = world
    record(turn_id=turn.id, session_id=session.id, step=0, usage=usage(100))
    record(turn_id=turn.id, session_id=session.id, step=1, usage=usage(200))
    Session.objects.filter(pk=session.id).update(deleted_at="2026-01-01T00:00:00Z")
    clock.now += 1
    assert publisher.flush_due() == 0
    assert len(session_updates(session)) == 1


@pytest.fixture
def threaded(monkeypatch: pytest.MonkeyPatch) -> Iterator[SessionPublisher]:
    pub = SessionPublisher(interval=0.3)
    monkeypatch.setattr(accounting, "PUBLISHER", pub)
    yield pub
    pub.stop()


@pytest.mark.django_db(transaction=True)
def test_the_deferred_publication_arrives_on_its_own(
        threaded: SessionPublisher, world: tuple[Session, Turn]) -> None:
    session, turn = world
    for step, prompt in enumerate((500, 600, 700)):
        record_answer(turn_id=turn.id, session_id=session.id, message_id=None, step=step,
                      model=MODEL, usage=usage(prompt), prompt_estimate=0,
                      shared_prefix_ratio=None)
    deadline = time.monotonic() + 10
    while len(session_updates(session)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p["current_context_tokens"] for p in session_updates(session)] == [500, 700]
    assert threaded.pending() == []


def test_the_calls_are_listed_in_the_admin(
        record: Callable[..., None], world: tuple[Session, Turn], priced: ModelPrice,
        make_user: Any) -> None:
    from django.test import Client

    session, turn = world
    record(turn_id=turn.id, session_id=session.id, step=0, shared_prefix_ratio=0.75, usage=Usage(
        prompt_tokens=1000, completion_tokens=50, cached_tokens=400, total_tokens=1050,
        cache_write_tokens=300, reasoning_tokens=7))
    staff = Client()
    staff.force_login(make_user(is_staff=True, is_superuser=True))
    listing = staff.get("/admin/turns/llmcall/").content.decode()
    assert "0.00195000" in listing  # 300*2 + 400*0.5 + 300*2.5 + 50*8 per million
    assert "0.75" in listing
    page = staff.get(f"/admin/turns/turn/{turn.pk}/change/")
    assert page.status_code == 200
    assert "0.00195000" in page.content.decode()
    assert staff.get("/admin/turns/llmcall/add/").status_code == 403
