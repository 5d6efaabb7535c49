"""The stored conversation of a session, as the model sees it: blocks of Chat Completions messages.

``load(session, turn)`` reads the session's messages and renders them in blocks: a user message,
a summary, the files a compaction re-injected, or one model answer (its text and every tool call
of that answer, each followed by its result). Blocks are what compaction keeps or summarises and
what microcompact looks into; the prompt is their concatenation.

Invariants:

* **Order.** Messages sent while an earlier turn ran have lower offsets than that turn's answers,
  so the order is by the offset of each turn's trigger message, then by position in the turn.
* **Complete pairs.** A tool call is rendered only with its stored result (paired by
  ``parent_message_id``: models reuse call ids such as ``call_0``), so a call cut by a stop, a
  rejection, a timeout or a crash never reaches the model without its result.
* **Same bytes as the engine's transcript.** The text and the calls of one answer are one
  assistant message, as the engine sent them while the turn ran; so the next turn's prompt
  repeats the previous one byte for byte (the provider's prefix cache hits).
* **Compaction boundary.** A ``summary`` message replaces what came before the message it
  points at (``parent_message``: the first message of the kept tail); the prompt starts with the
  latest summary, then the tail, then what came after. A summary whose tail start is unknown (a
  fork that did not copy it, or one written before tails were kept) keeps every message it sees.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import F, QuerySet, Subquery

from apps.attachments.prompt import user_content
from apps.attachments.services import attachments_for_conversation, files_of, image_data_url
from apps.sessions.models import ContentType, Message, MessageRole, Session
from apps.turns.models import Turn
from rtcagent.rows import Columns, read

SUMMARY_HEADER = "Summary of the conversation:\n"
FILES_HEADER = (
    "Files read before the conversation was summarised, as they were last read (they may have "
    "changed since; read a file again before editing it):\n"
)
FILE_TITLE = "File: "
# turn:<turn>:<step>:<part>: the text of answer n is written at step n, its calls and their
# results once the answer is counted, at step n + 1 (``apps.turns.engine``).
_STEP = re.compile(r"^turn:[^:]+:(\d+):(call|result|markdown|thinking)\b")


@dataclass
class ToolResult:
    """A tool message of a block, with what microcompact and re-injection need to know."""

    index: int  # position in ``Block.messages``
    name: str
    arguments: str
    output: str  # the whole output as stored
    offset: int  # global_offset of the stored result: results are cleared in this order


@dataclass
class Block:
    kind: str  # "summary", "files", "user" or "answer"
    messages: list[dict[str, Any]]
    anchor: Any = None  # id of the first stored message: where a tail kept from here starts
    text: bool = False  # holds text the user or the model wrote (tail retention counts these)
    results: list[ToolResult] = field(default_factory=list)


@dataclass
class Conversation:
    blocks: list[Block]
    summary: Message | None = None  # the latest summary, if the conversation starts at one


def load(
    session: Session, turn: Turn | None = None, *, turn_steps: int = 0, whole: bool = False,
    pending: Sequence[Message] = (),
) -> Conversation:
    """The conversation before ``turn`` (with its trigger message), or the whole session.

    ``turn_steps`` adds the turn's first ``turn_steps`` answers (complete pairs only): what
    the turn's next model call continues from. A later answer may have left a partial text
    behind (a crash mid-stream); it is not part of the conversation until the engine has
    finished it.

    After a compaction only the latest summary and what it keeps are read (``_rows``), so a
    model call costs the same however long the session was before its summary. ``whole``
    reads every message (the same conversation; tests compare the two). ``pending``: the
    turn's messages whose transaction has not committed yet, placed as stored ones (an early
    tool result: its call is a row, so its ``start_at`` is the call's); a row of the same id
    wins."""
    found = None if whole else _latest_summary(session.id)
    rows = list(_rows(session.id, found))
    if found is not None and not _kept_by(rows, found):  # changed between the two statements
        rows = list(_rows(session.id, None))
    if pending:
        by_id = {m.id: m for m in rows}
        for m in pending:
            parent = by_id.get(m.parent_message_id)
            if m.id not in by_id and parent is not None:
                m.start_at = parent.start_at
                rows.append(m)

    def key(m: Message) -> tuple[int, int, int]:
        # the offset last: a live call's turn takes in the inputs it answers, which share the
        # trigger's place in it (``apps.live.services.take_in_earlier_inputs``)
        start = m.start_at if m.start_at is not None else m.global_offset
        return (start, m.turn_offset if m.turn_id else 0, m.global_offset)

    trigger = None
    if turn is not None and turn.trigger_message_id is not None:
        # read with the rows (not a query of its own), and kept on the turn for its other readers
        trigger = next((m for m in rows if m.id == turn.trigger_message_id), None)
        if trigger is None:  # deleted, or before the summary: the reference still orders
            trigger = (Message.objects.filter(pk=turn.trigger_message_id)
                       .annotate(start_at=_START_AT).first())
        if trigger is not None:
            turn.trigger_message = trigger
    summaries = sorted(
        (m for m in rows if m.content.get("type") == ContentType.SUMMARY),
        key=lambda m: m.global_offset,
    )
    chosen = sorted(
        (
            m for m in rows
            if m.content.get("type") != ContentType.SUMMARY
            and (trigger is None or key(m) <= key(trigger) or _in_steps(m, turn, turn_steps))
        ),
        key=key,
    )
    summary = summaries[-1] if summaries else None
    if summary is not None:
        by_id = {m.id: m for m in rows}
        start = by_id.get(summary.parent_message_id)
        if start is not None:
            chosen = [m for m in chosen if key(m) >= key(start)]
    blocks = _summary_blocks(summary) if summary is not None else []
    blocks += _blocks(chosen)
    return Conversation(blocks=blocks, summary=summary)


# a message's place: the offset of its turn's trigger (None outside a turn, or without one)
_START_AT = F("turn__trigger_message__global_offset")


def _rows(session_id: Any, found: Tail | None) -> list[Message] | QuerySet[Message]:
    """The session's messages not deleted, each with ``start_at``; with ``found`` (a compacted
    session), only those placed at or after the first message its summary keeps: their own
    offset is there, or their turn's trigger is (the inputs a live call took in come before
    their trigger). Two index range reads, not a pass over the session."""
    if found is None:
        return _all_rows(session_id)
    rows = (Message.objects.filter(session_id=session_id, deleted_at__isnull=True)
            .annotate(start_at=_START_AT))
    since = found.since
    later_turns = (Message.objects.filter(session_id=session_id, global_offset__gte=since,
                                          turn__trigger_message__global_offset__gte=since)
                   .values("turn_id"))
    taken_in = rows.filter(turn_id__in=Subquery(later_turns), global_offset__lt=since)
    return rows.filter(global_offset__gte=since).union(taken_in, all=True)


_MESSAGE = Columns(Message, "m")


@functools.cache
def _all_rows_sql() -> str:
    message, turn = Message._meta.db_table, Turn._meta.db_table
    return (f"SELECT {_MESSAGE.sql()}, tm.global_offset FROM {message} m "  # noqa: S608
            f"LEFT JOIN {turn} t ON t.id = m.turn_id "
            f"LEFT JOIN {message} tm ON tm.id = t.trigger_message_id "
            "WHERE m.session_id = %s AND m.deleted_at IS NULL")


def all_rows_statement(session_id: Any) -> tuple[str, list[Any]]:
    """``_all_rows``' statement (``rtcagent.rows.together`` reads it with others)."""
    return _all_rows_sql(), [Message._meta.get_field("session").get_db_prep_value(session_id,
                                                                                   connection)]


def _all_rows(session_id: Any) -> list[Message]:
    """``_rows`` of a session without a summary, as one hand-written statement
    (``rtcagent.rows``): it runs before every model call, and the ORM's query with its
    two-join annotation cost more to compile than to run."""
    rows = read(*all_rows_statement(session_id))
    converters = _MESSAGE.converters()
    out = []
    for row in rows:
        m = _MESSAGE.build(row[:-1], converters=converters)
        m.start_at = row[-1]
        out.append(m)
    return out


def _kept_by(rows: list[Message], found: Tail) -> bool:
    """Whether ``rows`` still hold the summary ``found`` named, as the latest one, and the
    first message it keeps (a summary or message deleted between the two statements: no)."""
    ids = {m.id for m in rows}
    latest = max((m for m in rows if m.content.get("type") == ContentType.SUMMARY),
                 key=lambda m: m.global_offset, default=None)
    return latest is not None and latest.id == found.summary_id and found.start_id in ids


@dataclass(frozen=True)
class Tail:
    """A compacted session's latest summary and the first message it keeps, with its place."""

    summary_id: uuid.UUID
    start_id: uuid.UUID
    since: int


# PostgreSQL: ``message_summary``'s condition as its schema editor writes it (the planner uses
# a partial index only for a query that states its condition). SQLite's schema editor writes a
# condition that differs from process to process (an ``IN`` list built from a set), so there
# the lookup walks the session's offset index backwards to its latest summary instead.
_IS_SUMMARY = {
    "postgresql": """("content" -> 'type') = '"summary"'::jsonb""",
    "sqlite": """JSON_EXTRACT("content", '$.type') = 'summary'""",
}


def _latest_summary(session_id: Any) -> Tail | None:
    """The session's latest summary and the first message it keeps; None without one, when
    that message is not a row of the session, or on a database without ``_IS_SUMMARY``.

    Written as SQL: it runs before every model call, and the ORM took 0.6 ms of CPU to build
    it against 0.1 ms for the whole statement written out."""
    statement = summary_statement(session_id)
    if statement is None:
        return None
    found = read(*statement)
    row = found[0] if found else None
    if row is None or row[2] is None:
        return None
    return Tail(summary_id=uuid.UUID(str(row[0])), start_id=uuid.UUID(str(row[1])),
                since=int(row[2]))


def summary_statement(session_id: Any) -> tuple[str, list[Any]] | None:
    """``_latest_summary``'s statement (``rtcagent.rows.together`` reads it with others);
    None on a database without ``_IS_SUMMARY``."""
    is_summary = _IS_SUMMARY.get(connection.vendor)
    if is_summary is None:
        return None
    message, turn = Message._meta.db_table, Turn._meta.db_table
    # table names from the models and a fixed condition: nothing of the caller's in the text
    sql = f"""
        SELECT s.id, p.id, CASE WHEN p.session_id = s.session_id AND p.deleted_at IS NULL
                                THEN COALESCE(tm.global_offset, p.global_offset) END
        FROM (SELECT id, session_id, parent_message_id FROM {message}
              WHERE session_id = %s AND deleted_at IS NULL AND {is_summary}
              ORDER BY global_offset DESC LIMIT 1) s
        LEFT JOIN {message} p ON p.id = s.parent_message_id
        LEFT JOIN {turn} pt ON pt.id = p.turn_id
        LEFT JOIN {message} tm ON tm.id = pt.trigger_message_id
    """  # noqa: S608
    return sql, [Message._meta.get_field("session").get_db_prep_value(session_id, connection)]


def conversation_for(session: Session, turn: Turn | None = None) -> list[dict[str, Any]]:
    """Chat Completions messages of the conversation before ``turn`` (or the whole session), as
    stored: no budget, no microcompact (``apps.turns.context`` applies those)."""
    return [m for b in load(session, turn).blocks for m in b.messages]


def _summary_blocks(summary: Message) -> list[Block]:
    items = [i for i in summary.content.get("data") or [] if isinstance(i, dict)]
    files = [i for i in items if str(i.get("title", "")).startswith(FILE_TITLE)]
    text = "\n\n".join(str(i.get("content", "")) for i in items if i not in files)
    out = [Block("summary", [{"role": "system", "content": SUMMARY_HEADER + text}],
                 anchor=summary.id)]
    if files:
        body = "\n\n".join(
            f'<file path="{str(i["title"])[len(FILE_TITLE):]}">\n{i.get("content", "")}\n</file>'
            for i in files
        )
        out.append(Block("files", [{"role": "system", "content": FILES_HEADER + body}],
                         anchor=summary.id))
    return out


def _in_steps(m: Message, turn: Turn | None, answers: int) -> bool:
    if turn is None or m.turn_id != turn.id:
        return False
    answer = _answer_of(m)
    return answer is not None and answer[1] < answers


def _answer_of(m: Message) -> tuple[Any, int] | None:
    """(turn, answer number) of a message the engine wrote; None for copies (forks) and users."""
    found = _STEP.match(m.client_id or "") if m.turn_id else None
    if found is None:
        return None
    step = int(found.group(1))
    return (m.turn_id, step - 1 if found.group(2) in ("call", "result") else step)


def _blocks(messages: list[Message]) -> list[Block]:
    """Blocks of stored messages in order: users, summaries, and answers grouped per step.

    User messages carry their attachments (images as image parts, text files in
    ``<file_content>``, skipped ones as a note); files not processed yet are processed here
    first, so before the first LLM call that includes them (``apps.attachments.services``)."""
    attachments = attachments_for_conversation(messages)
    outputs = {
        m.parent_message_id: m
        for m in messages
        if m.content.get("type") == ContentType.TOOLCALL_OUTPUT and m.parent_message_id
    }
    steps: dict[Any, list[Message]] = {}
    order: list[Any] = []  # users and answers, at the position of their first message
    for m in messages:
        answer = _answer_of(m)
        group = answer if answer is not None else m.id
        if group not in steps:
            steps[group] = []
            order.append(group)
        steps[group].append(m)
    out: list[Block] = []
    for group in order:
        members = steps[group]
        first = members[0]
        if first.role == MessageRole.USER and len(members) == 1:
            out.append(_user_block(first, attachments))
            continue
        block = _answer_block(members, outputs)
        if block is not None:
            out.append(block)
    return out


def _user_block(m: Message, attachments: dict[Any, Any]) -> Block:
    data = m.content.get("data")
    text = data.get("text", "") if isinstance(data, dict) else str(data)
    files = files_of(m)
    content = (user_content(text, files, attachments.get(m.id, []), image_data_url)
               if files else text)
    return Block("user", [{"role": "user", "content": content}], anchor=m.id, text=True)


def _answer_block(members: list[Message], outputs: dict[Any, Message]) -> Block | None:
    """One model answer: its text, then its calls that have a result, each result after."""
    text = ""
    calls: list[dict[str, Any]] = []
    results: list[tuple[dict[str, Any], Message]] = []
    for m in members:
        kind, data = m.content.get("type"), m.content.get("data")
        if m.role == MessageRole.USER:  # a user message inside a step: never written so
            continue
        if kind == ContentType.MARKDOWN and data and not text:
            text = str(data)
        elif kind == ContentType.TOOLCALL_INPUT and m.id in outputs:
            calls.append({"id": data["id"], "type": "function",
                          "function": {"name": data["tool_name"], "arguments": data["input"]}})
            results.append((data, outputs[m.id]))
    if not calls:
        if not text:
            return None
        return Block("answer", [{"role": "assistant", "content": text}],
                     anchor=members[0].id, text=True)
    block = Block("answer", [{"role": "assistant", "content": text or None, "tool_calls": calls}],
                  anchor=members[0].id, text=bool(text))
    for data, output in results:
        stored = output.content["data"]
        block.results.append(ToolResult(
            index=len(block.messages), name=str(data["tool_name"]),
            arguments=str(data["input"]), output=str(stored.get("output", "")),
            offset=output.global_offset,
        ))
        block.messages.append({"role": "tool", "tool_call_id": data["id"],
                               "content": str(stored.get("output", ""))})
    return block
