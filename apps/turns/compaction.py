"""Compaction: a summary message replaces the older part of a conversation; the recent tail stays.

Three ways in, one way to do it (``compact_conversation``):

* **auto compact**, inside a turn, when the prompt reaches the model's compression threshold
  (``apps.turns.context``); **session-memory compact** is the same with the session's memory as
  the summary (``apps.memory.prompt.session_memory_summary``): no LLM call;
* **reactive compact** (levels 2 and 3 of ``apps.turns.context``): the same, keeping a minimal
  tail;
* **manual compact** (``v1.session.compact``): queued like a message, so it runs between turns,
  never inside one, at most one per session at a time; ``custom_instruction`` steers the
  summary (it goes into the summariser's instructions, not after them).

The conversation's blocks (``apps.turns.conversation``) are split into a head, summarised, and a
tail kept verbatim (``prompt.tail_start``: whole answers, so no kept result loses its call). The
summary is a ``summary`` message (readable by the user) whose ``parent_message`` is the first
message of the tail; its data items are the summary and the files the head had read, re-injected
within a budget (``File: <path>`` items), so the model can carry on without reading them again.

Summaries are asked for with the conversation rendered as text, in as many calls as it takes:
each chunk fits the model's window with the summary so far, which the next call extends
(chunked summarisation), so a history twice the window or more is still summarised.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import transaction

from apps.gateway.events import item, publish_update
from apps.sessions.models import ContentType, Message, MessageRole, Session
from apps.sessions.serializers import message_to_dict
from apps.sessions.services import session_allocate_offsets
from apps.turns import prompt, queue, tokens
from apps.turns.conversation import FILE_TITLE, Block, Conversation
from apps.turns.llm import ChatModel, TextDelta, Usage
from apps.turns.llm_errors import LLMError
from apps.turns.profiles import ModelProfile, profile_for
from rtcagent import keys
from rtcagent.redis import get_redis

log = logging.getLogger(__name__)

PENDING_TTL = 3600  # longer than a turn may wait on askUser (30 min)
SUMMARY_TITLE = "Summary of the earlier conversation"
MEMORY_TITLE = "Session memory (used as the summary)"
SUMMARY_PROMPT = (
    "Summarize the conversation so far for your own later use; it will replace the messages "
    "it covers, and the most recent messages will follow it. Use these sections:\n"
    "1. Primary request and intent: what the user asked for, in detail.\n"
    "2. Key technical concepts: technologies, frameworks and ideas discussed.\n"
    "3. Files and code sections: files read, written or edited, with the important code.\n"
    "4. Errors and fixes: what went wrong and how it was fixed, corrections by the user.\n"
    "5. Problem solving: what was solved and what is still being worked out.\n"
    "6. All user messages: every message the user wrote (not tool results), briefly.\n"
    "7. Pending tasks: what the user asked for that is not done yet.\n"
    "8. Current work: what was being done right before this summary, precisely.\n"
    "9. Optional next step: the next step, only if it follows from the latest request.\n"
    "Be complete but concise; write the summary only."
)
SUMMARIZER = (
    "You write summaries of conversations between a user and an AI agent whose tools run in "
    "the user's browser (a virtual file system, a JavaScript sandbox, questions to the user). "
    "The summary replaces the conversation in the agent's memory, so keep every fact the agent "
    "needs to continue the work."
)
STEERING = (
    "\n\nThe user asked for this summary with an instruction. Let it decide what to keep in "
    "detail and what to shorten, within the nine sections:\n<instruction>\n{}\n</instruction>"
)
PREVIOUS = "<summary_so_far>\n{}\n</summary_so_far>\n\n"
CHUNK = "<conversation>\n{}\n</conversation>\n\n"
CONTINUED = (
    "The conversation is long, so you get it in parts: the summary so far covers the parts "
    "before this one. Write one summary of everything.\n\n"
)
_ERROR_PREFIXES = ("[Tool Error]", "[Tool Rejected]", "[Tool Timeout]", "[Tool Pending]")


@dataclass(frozen=True)
class Retention:
    """How much of the recent conversation a compaction keeps (``prompt.tail_start``)."""

    min_tokens: int
    min_messages: int
    max_tokens: int

    @classmethod
    def normal(cls, profile: ModelProfile) -> Retention:
        """The original's 10K tokens and 5 messages, at most 40K, scaled to small windows."""
        threshold = profile.compression_threshold
        most = min(40_000, int(threshold * 0.35))
        return cls(min(10_000, int(threshold * 0.1)), 5, most)

    @classmethod
    def minimal(cls, profile: ModelProfile) -> Retention:
        """Reactive levels 2 and 3: the latest exchange only."""
        return cls(0, 1, min(10_000, int(profile.compression_threshold * 0.1)))


def files_budget(profile: ModelProfile) -> int:
    """Tokens of re-injected files in all (the original's 10K, scaled to small windows)."""
    return min(10_000, int(profile.compression_threshold * 0.1))


# --- requesting and running a manual compaction -----------------------------------------------


def _pending_key(session_id: object) -> str:
    return keys.compaction_pending(session_id)


def request_compaction(session: Session, instruction: str) -> bool:
    """Queue a compaction behind the session's turns; False when one is already queued."""
    if not get_redis().set(_pending_key(session.id), "1", nx=True, ex=PENDING_TTL):
        return False
    queue.enqueue(
        str(session.id),
        {"kind": "compact", "session_id": str(session.id), "instruction": instruction},
        user_id=session.user_id,
    )
    return True


def compact(session_id: str, instruction: str, llm: ChatModel) -> Message | None:
    """``v1.session.compact`` in the worker: summarise all but the recent tail (None when there
    is nothing to summarise, or the model failed; the session stays as it was)."""
    from apps.turns import conversation
    from apps.turns.context import cleared_upto, session_prompt_tokens

    try:
        session = Session.objects.filter(pk=session_id, deleted_at__isnull=True).first()
        if session is None:
            return None
        profile = profile_for(getattr(llm, "model", None))
        conv = conversation.load(session)
        if sum(b.text for b in conv.blocks) < 2:
            return None
        sizes = [block_tokens(b) for b in conv.blocks]
        # A manual compaction also runs on short conversations: keep at most half of it.
        normal = Retention.normal(profile)
        keep = Retention(normal.min_tokens, normal.min_messages,
                         min(normal.max_tokens, sum(sizes) // 2))
        from apps.turns.accounting import record_call

        def bill(usage: Usage) -> None:
            record_call(session_id=session.id, model=profile.name, usage=usage,
                        purpose="compaction")

        try:
            msg = compact_conversation(
                session, conv, llm=llm, profile=profile, retention=keep,
                instruction=instruction, use_memory=False, cleared=cleared_upto(session.id),
                on_usage=bill,
            )
        except LLMError as err:
            log.warning("compaction of session %s failed: %s", session_id, err.category)
            return None
        if msg is not None:
            from apps.turns.accounting import set_context_tokens

            set_context_tokens(session_id=session.id,
                               tokens=session_prompt_tokens(session, profile))
        return msg
    finally:
        get_redis().delete(_pending_key(session_id))


# --- the compaction itself --------------------------------------------------------------------


def block_tokens(block: Block) -> int:
    return sum(tokens.count_message(m) for m in block.messages)


def split(conv: Conversation, retention: Retention) -> int:
    """Index of the first block kept: summary and files blocks always go to the head."""
    first = next((i for i, b in enumerate(conv.blocks) if b.kind not in ("summary", "files")),
                 len(conv.blocks))
    body = conv.blocks[first:]
    if not body:
        return len(conv.blocks)
    start = prompt.tail_start(
        [block_tokens(b) for b in body], [b.text for b in body],
        min_tokens=retention.min_tokens, min_messages=retention.min_messages,
        max_tokens=retention.max_tokens,
    )
    return first + start


def compact_conversation(
    session: Session,
    conv: Conversation,
    *,
    llm: ChatModel,
    profile: ModelProfile,
    retention: Retention,
    instruction: str = "",
    use_memory: bool = True,
    file_share: float = 1.0,
    cleared: int = 0,
    should_cancel: Callable[[], bool] | None = None,
    on_usage: Callable[[Usage], None] | None = None,
) -> Message | None:
    """Summarise the head of ``conv`` into a ``summary`` message that keeps the tail; None when
    the head has nothing that a summary would replace. ``LLMError`` when the summary call
    failed (nothing is written).

    The summariser reads the head as the model last saw it: outputs microcompact cleared (up to
    the offset ``cleared``) as their placeholder, so a summary costs what the conversation
    costs, not what every output ever read would."""
    start = split(conv, retention)
    head, tail = conv.blocks[:start], conv.blocks[start:]
    if not tail or not any(b.kind not in ("summary", "files") for b in head):
        return None
    title, text = SUMMARY_TITLE, None
    if use_memory and not instruction:
        from apps.memory.prompt import session_memory_summary

        text = session_memory_summary(str(session.id))
        title = MEMORY_TITLE
    if not text:
        title = SUMMARY_TITLE
        text = summarize(head, llm=llm, profile=profile, instruction=instruction,
                         cleared=cleared, should_cancel=should_cancel, on_usage=on_usage)
    if not text:
        return None
    files = reinjected_files(head, tail, budget=int(files_budget(profile) * file_share))
    return store_summary(session, [{"title": title, "content": text}, *files],
                         keep_from=tail[0].anchor)


def store_summary(session: Session, items: list[dict[str, str]], *, keep_from: Any) -> Message:
    """The ``summary`` message (published): prompts start with it, then ``keep_from`` on."""
    with transaction.atomic():
        offset = session_allocate_offsets(session_id=session.id)
        msg = Message.objects.create(
            session_id=session.id, user_id=session.user_id,
            client_id=f"turn:compact:{uuid.uuid4().hex}", global_offset=offset,
            role=MessageRole.SYSTEM, parent_message_id=keep_from,
            content={"type": ContentType.SUMMARY, "data": items},
        )
        publish_update(user_id=session.user_id, items=[item("message", "created", msg.id)],
                       data_list=[message_to_dict(msg)])
    return msg


def reinjected_files(head: list[Block], tail: list[Block], *, budget: int) -> list[dict[str, str]]:
    """The files the head read last (newest first, at most 5, each within a fifth of
    ``budget``), leaving out those the tail reads again and failed reads."""
    if budget <= 0:
        return []
    per_file = budget // 5
    seen = {_path(r.arguments) for b in tail for r in b.results if r.name == "read"}
    out: list[dict[str, str]] = []
    used = 0
    for block in reversed(head):
        for result in reversed(block.results):
            path = _path(result.arguments)
            if (result.name != "read" or not path or path in seen
                    or result.output.startswith(_ERROR_PREFIXES)):
                continue
            seen.add(path)
            content = prompt.truncate_output(result.output, per_file, tokens.count_text)
            cost = tokens.count_text(content)
            if used + cost > budget or len(out) == 5:
                return out
            used += cost
            out.append({"title": FILE_TITLE + path, "content": content})
    return out


def _path(arguments: str) -> str:
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return ""
    path = value.get("path") if isinstance(value, dict) else None
    return path if isinstance(path, str) else ""


# --- summaries --------------------------------------------------------------------------------


def summarize(
    blocks: list[Block],
    *,
    llm: ChatModel,
    profile: ModelProfile,
    instruction: str = "",
    cleared: int = 0,
    should_cancel: Callable[[], bool] | None = None,
    on_usage: Callable[[Usage], None] | None = None,
) -> str:
    """A nine-section summary of ``blocks``, in as many calls as their text needs."""
    system = SUMMARIZER + (STEERING.format(instruction.strip()) if instruction.strip() else "")
    overhead = (tokens.count_text(system) + tokens.count_text(SUMMARY_PROMPT + CONTINUED)
                + 64)
    room = profile.context_window - profile.max_output_tokens - overhead
    summary = ""
    for chunk in _chunks(blocks, profile, room, cleared):
        previous = PREVIOUS.format(summary) if summary else ""
        ask = (CONTINUED if summary else "") + previous + CHUNK.format(chunk) + SUMMARY_PROMPT
        messages = prompt.validate([{"role": "system", "content": system},
                                    {"role": "user", "content": ask}])
        parts: list[str] = []
        for event in llm.stream(messages, None, should_cancel=should_cancel):
            if isinstance(event, TextDelta):
                parts.append(event.text)
            elif on_usage is not None and isinstance(event, Usage):
                on_usage(event)
        summary = "".join(parts).strip() or summary
    return summary


def _chunks(blocks: list[Block], profile: ModelProfile, room: int, cleared: int) -> list[str]:
    """The blocks as text, in chunks that fit ``room`` tokens beside the summary so far (which
    is at most the model's output limit)."""
    size = max(1_000, room - profile.max_output_tokens)
    output_budget = max(200, min(profile.tool_result_budget, size // 4))
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for block in blocks:
        text = prompt.truncate_output(render(block, output_budget, cleared), size,
                                      tokens.count_text)
        cost = tokens.count_text(text) + 1
        if current and used + cost > size:
            chunks.append("\n\n".join(current))
            current, used = [], 0
        current.append(text)
        used += cost
    if current:
        chunks.append("\n\n".join(current))
    return chunks


def render(block: Block, output_budget: int, cleared: int = 0) -> str:
    """One block as the summariser reads it (outputs up to ``cleared`` as their placeholder)."""
    results = {r.index: r for r in block.results}
    lines: list[str] = []
    for i, m in enumerate(block.messages):
        if block.kind == "summary":
            lines.append("[Earlier summary]\n" + str(m["content"]))
        elif block.kind == "files":
            lines.append("[Files re-read after the earlier summary]\n" + str(m["content"]))
        elif m["role"] == "user":
            lines.append("[User]\n" + _text(m["content"]))
        elif m["role"] == "assistant":
            if m.get("content"):
                lines.append("[Assistant]\n" + str(m["content"]))
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                lines.append(f"[Tool call] {fn['name']} {fn['arguments']}")
        elif m["role"] == "tool" and i in results:
            result = results[i]
            if result.name in prompt.COMPACTABLE_TOOLS and result.offset <= cleared:
                output = prompt.placeholder(result.name)
            else:
                output = prompt.truncate_output(result.output, output_budget, tokens.count_text)
            lines.append(f"[Tool result of {result.name}]\n{output}")
    return "\n".join(lines)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if isinstance(part, dict) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
        else:
            parts.append("[image]")
    return "\n".join(parts)
