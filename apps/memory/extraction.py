"""The background extraction pass: session memory written by its own LLM call, off the turns.

* **Trigger** (``maybe_extract``, called by the worker after a turn finishes or pauses; a few
  cheap queries): the context is at least ``MEMORY_EXTRACT_INIT_TOKENS`` (10,000) and the
  conversation grew by ``MEMORY_EXTRACT_GROWTH_TOKENS`` (5,000) since the last extraction, with
  ``MEMORY_EXTRACT_MIN_TOOL_CALLS`` (3) tool calls since then or at a breakpoint (the last
  assistant message calls no tool). Then a job is queued (``jobs``): at most one per session.
* **Run** (``run_next``, called by the worker's loop when no session has work for it): claims a
  job, sends the conversation since the last extraction (its newest part within
  ``MEMORY_EXTRACT_TRANSCRIPT_TOKENS``) and the session's current notes to the model with one
  tool, ``save_session_memories``, and stores what the model passes to it as session memory
  (``services.session_memory_add``, source ``extraction``). The call is cancelled, and the job
  given back to the queue, as soon as a session has work for this worker (``should_yield``): an
  extraction never delays a turn by more than a streamed chunk.
* **Bookmark** (``ExtractionState``): the last message offset seen and the context size then,
  written with the notes in one transaction. A failed call leaves the bookmark and delays the
  next trigger by ``MEMORY_EXTRACT_RETRY_SECONDS``.

The model is whatever ``llm_factory`` gives (the worker's: ``OpenAIChat.from_settings``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson
from django.db import transaction
from django.utils import timezone
from jsonschema import Draft202012Validator

from apps.sessions.models import ContentType, Message, MessageRole, Session
from apps.turns.accounting import record_call
from apps.turns.llm import Cancelled, ChatModel, ToolCall, Usage
from apps.turns.llm_errors import LLMError
from apps.turns.profiles import profile_for

from . import jobs
from .limits import memory_setting
from .models import ExtractionState, MemorySource, SessionCategory
from .selectors import session_memories
from .services import session_memory_add

log = logging.getLogger(__name__)

TOOL_NAME = "save_session_memories"
TOOL_RESULT_CHARS = 2000  # a tool result in the transcript is cut here
ITEM_CHARS = 8000
SYSTEM_PROMPT = (
    "You extract session memory: short notes that let someone continue this session without "
    "rereading it. Read the conversation below (its part since the last extraction) and call "
    f"{TOOL_NAME} once with the NEW information, by category:\n"
    "- decision: choices made and why (technologies, designs, settings).\n"
    "- context: what is being worked on now: the task, its parts, the next steps.\n"
    "- progress: what is done, what is left, what blocks.\n"
    "- issue: errors met and how they were fixed, corrections by the user, approaches that "
    "failed.\n"
    "- learnings: what worked, what did not, insights worth keeping.\n"
    "Rules: only new information, never what the existing notes already say; be specific and "
    "dense (file paths, names, exact values, commands); write for a reader who has not seen "
    "the conversation; one fact or decision per item, a few sentences at most; leave out "
    "trivia and categories with nothing new. With nothing new, call the tool with no items."
)
_ITEMS = {"type": "array", "maxItems": 10,
          "items": {"type": "string", "minLength": 1, "maxLength": ITEM_CHARS}}
TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Save the notes extracted from the conversation. Include only "
                       "categories with new information; each item is one note.",
        "parameters": {
            "type": "object",
            "properties": {c: _ITEMS for c in SessionCategory.values},
            "additionalProperties": False,
        },
    },
}
_VALIDATOR = Draft202012Validator(TOOL_SCHEMA["function"]["parameters"])


# --- the trigger -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Growth:
    """What happened in a session since its last extraction."""

    messages: list[Message]  # newer than the bookmark, oldest first
    tokens: int  # their text's tokens
    tool_calls: int
    breakpoint: bool  # the last assistant message calls no tool


def _text(m: Message) -> str:
    """A message as a transcript section ("" for what the extraction does not read)."""
    kind, data = m.content.get("type"), m.content.get("data")
    if m.role == MessageRole.USER:
        text = data.get("text", "") if isinstance(data, dict) else str(data or "")
        return f"## user\n{text.strip()}" if text.strip() else ""
    if kind == ContentType.SUMMARY and isinstance(data, list):
        parts = [str(p.get("content", "")) for p in data if isinstance(p, dict)]
        return "## summary of the earlier conversation\n" + "\n\n".join(parts).strip()
    if kind == ContentType.MARKDOWN and isinstance(data, str) and data.strip():
        return f"## assistant\n{data.strip()}"
    if kind == ContentType.TOOLCALL_INPUT and isinstance(data, dict):
        return f"## assistant calls {data.get('tool_name', '?')}\n{data.get('input', '')}"
    if kind == ContentType.TOOLCALL_OUTPUT and isinstance(data, dict):
        output = str(data.get("output", ""))
        if len(output) > TOOL_RESULT_CHARS:
            output = output[:TOOL_RESULT_CHARS] + " [...cut...]"
        return f"## {data.get('tool_name', '?')} returned ({data.get('status', '')})\n{output}"
    return ""


def _is_assistant_turn(m: Message) -> bool:
    return m.role == MessageRole.ASSISTANT and m.content.get("type") in (
        ContentType.MARKDOWN, ContentType.TOOLCALL_INPUT,
    )


def growth_of(session_id: Any, after_offset: int) -> Growth:
    from apps.turns.tokens import count_text

    rows = list(
        Message.objects.filter(session_id=session_id, global_offset__gt=after_offset,
                               deleted_at__isnull=True).order_by("global_offset")
    )
    tokens = sum(count_text(_text(m)) for m in rows)
    calls = sum(1 for m in rows if m.content.get("type") == ContentType.TOOLCALL_INPUT)
    last = next((m for m in reversed(rows) if _is_assistant_turn(m)), None)
    breakpoint = last is not None and last.content.get("type") == ContentType.MARKDOWN
    return Growth(rows, tokens, calls, breakpoint)


def _context_tokens(session: Session) -> int:
    """The session's context size: the accounting's figure, else an estimate of the
    conversation since the latest summary."""
    if session.current_context_tokens:
        return int(session.current_context_tokens)
    summary = (Message.objects.filter(session_id=session.id, deleted_at__isnull=True,
                                      content__type=ContentType.SUMMARY)
               .order_by("-global_offset").values_list("global_offset", flat=True).first())
    return growth_of(session.id, (summary or 1) - 1).tokens


def should_extract(session_id: Any) -> bool:
    """Whether the session's conversation grew enough for an extraction (module docstring)."""
    # after every turn and pause: the two columns it needs, not the session's ~40
    session = (Session.objects.filter(pk=session_id, deleted_at__isnull=True)
               .only("id", "current_context_tokens").first())
    if session is None:
        return False
    init = int(memory_setting("MEMORY_EXTRACT_INIT_TOKENS"))
    if session.current_context_tokens and session.current_context_tokens < init:
        return False  # the accounting's figure: no need to read the messages
    state = ExtractionState.objects.filter(session_id=session.id).first()
    if state is not None and state.retry_after and state.retry_after > timezone.now():
        return False
    grown = growth_of(session.id, state.last_offset if state else 0)
    if grown.tokens < int(memory_setting("MEMORY_EXTRACT_GROWTH_TOKENS")):
        return False
    if not grown.breakpoint and grown.tool_calls < int(
        memory_setting("MEMORY_EXTRACT_MIN_TOOL_CALLS")
    ):
        return False
    return _context_tokens(session) >= init


def maybe_extract(session_id: str) -> None:
    """After a turn finished or paused: queue an extraction of the session when it is due.
    Never calls a model; the job runs later, between sessions (``run_next``)."""
    if should_extract(session_id) and jobs.enqueue(str(session_id)):
        log.info("session memory extraction queued for session %s", session_id)


# --- the run ---------------------------------------------------------------------------------


def build_request(session_id: Any, grown: Growth) -> list[dict[str, Any]]:
    """The messages of the extraction call: the instructions, the existing notes and the newest
    part of the conversation since the last extraction that fits the budget."""
    from apps.turns.tokens import count_text

    budget = int(memory_setting("MEMORY_EXTRACT_TRANSCRIPT_TOKENS"))
    sections: list[str] = []
    used = 0
    for m in reversed(grown.messages):
        text = _text(m)
        if not text:
            continue
        cost = count_text(text)
        if sections and used + cost > budget:
            break
        sections.append(text)
        used += cost
    notes = "\n".join(f"- [{n.category}] {n.content}" for n in session_memories(session_id))
    prompt = (
        "# Existing session notes\n" + (notes or "(none yet)")
        + "\n\n# Conversation since the last extraction\n"
        + "\n\n".join(reversed(sections))
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]


def _parse(call: ToolCall | None) -> list[tuple[str, str]]:
    if call is None or call.name != TOOL_NAME:
        return []
    try:
        args = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError:
        log.warning("extraction: the model's %s arguments are not JSON", TOOL_NAME)
        return []
    if not isinstance(args, dict):
        return []
    # Keep what is valid: an item too long or a stray field spoils only itself.
    entries: list[tuple[str, str]] = []
    for category in SessionCategory.values:
        items = args.get(category) or []
        if not isinstance(items, list):
            continue
        for item in items[:10]:
            if isinstance(item, str) and item.strip() and "\x00" not in item:
                entries.append((category, item.strip()[:ITEM_CHARS]))
    if not _VALIDATOR.is_valid(args):
        log.info("extraction: the model's %s arguments were partly invalid", TOOL_NAME)
    return entries


def extract(session_id: str, llm: ChatModel, *,
            should_cancel: Callable[[], bool] | None = None,
            still_held: Callable[[], bool] = lambda: True) -> int:
    """Run one extraction of the session now; the number of notes saved. ``Cancelled``
    propagates (nothing is written); a model failure delays the next trigger; a runner whose
    job was taken over (``still_held`` false) writes nothing."""
    session = Session.objects.filter(pk=session_id, deleted_at__isnull=True).first()
    if session is None:
        return 0
    state, _ = ExtractionState.objects.get_or_create(session_id=session.id)
    grown = growth_of(session.id, state.last_offset)
    if not grown.messages:
        return 0
    messages = build_request(session.id, grown)
    call = None
    try:
        for event in llm.stream(messages, [TOOL_SCHEMA], should_cancel=should_cancel):
            if isinstance(event, ToolCall) and call is None:
                call = event
            elif isinstance(event, Usage):  # billed even when the notes are not kept
                model = profile_for(getattr(llm, "model", None)).name
                record_call(session_id=session.id, model=model, usage=event,
                            purpose="extraction")
    except LLMError as err:
        log.warning("extraction of session %s failed: %s %s", session_id, err.category,
                    err.title)
        retry = float(memory_setting("MEMORY_EXTRACT_RETRY_SECONDS"))
        ExtractionState.objects.filter(pk=session.id).update(
            retry_after=timezone.now() + timedelta(seconds=retry))
        return 0
    entries = _parse(call)
    context = _context_tokens(session)
    if not still_held():
        log.warning("extraction of session %s outlived its lease; dropped", session_id)
        return 0
    with transaction.atomic():
        kept: list[Any] = []
        if entries:
            kept, _ = session_memory_add(user_id=session.user_id, session_id=session.id,
                                         entries=entries, source=MemorySource.EXTRACTION)
        ExtractionState.objects.filter(pk=session.id).update(
            last_offset=grown.messages[-1].global_offset, last_tokens=context,
            runs=state.runs + 1, retry_after=None, extracted_at=timezone.now(),
        )
    log.info("extraction of session %s saved %d notes", session_id, len(kept))
    return len(kept)


class SessionsWaiting:
    """``should_yield`` for the worker: true once a session with work is free to claim (asked of
    Redis at most every ``interval`` seconds; the model's stream polls far more often)."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self._checked = 0.0
        self._answer = False

    def __call__(self) -> bool:
        now = time.monotonic()
        if not self._answer and now - self._checked >= self.interval:
            self._checked = now
            self._answer = sessions_waiting()
        return self._answer


def sessions_waiting(scan: int = 32) -> bool:
    """Whether a session with queued work is free to be claimed (``apps.turns.queue``)."""
    from apps.turns import queue

    return queue.has_claimable(scan)


def run_next(llm_factory: Callable[[], ChatModel],
             should_yield: Callable[[], bool] = lambda: False) -> bool:
    """Claim and run one queued extraction; False when none was queued.

    ``should_yield`` is polled while the model streams: when it turns true the call is
    cancelled and the job goes back to the queue, unfinished."""
    job = jobs.claim()
    if job is None:
        return False

    def cancel() -> bool:
        return not job.renew() or should_yield()

    try:
        extract(job.session_id, llm_factory(), should_cancel=cancel,
                still_held=lambda: job.renew(force=True))
    except Cancelled:
        log.info("extraction of session %s given back: a session has work", job.session_id)
        job.release()
        return True
    except Exception:
        log.exception("extraction of session %s failed", job.session_id)
    job.finish()
    return True
