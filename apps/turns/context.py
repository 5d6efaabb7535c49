"""Each request of a turn: layout, tool-result budget, microcompact, compaction, reactive levels.

``TurnContext.build(cp)`` turns the stored conversation (``apps.turns.conversation``) into the
messages of the next call. In order:

1. **Layout.** A stable prefix (the system prompt with the work mode, the agent prompt and the
   user's pinned memories; the tool schemas travel beside it), then the conversation (the latest
   summary, the files it re-injected, the kept tail, what came after, this turn's answers so
   far), then the volatile part last: memories recalled for this turn. Consecutive calls share
   everything but that last message, so the provider's prefix cache hits.
2. **Tool-result budget.** Every tool output is cut to ``tool_result_budget`` tokens in what is
   sent (``prompt.truncate_output``); the stored message keeps the whole output.
3. **Microcompact.** Outputs of ls/read/write/grep/find/script up to a *sticky boundary* are sent
   as a placeholder. The boundary moves (to keep ``keep_recent_tool_results`` outputs) only when
   rewriting the prefix costs nothing or is needed: when the cache has gone cold (no call of the
   session for ``cache_cold_seconds``, e.g. after a tool that waited on the user) and when the
   prompt reaches the compression threshold. Between those moments the prefix stays put.
4. **Auto compact** at the threshold (``apps.turns.compaction``), with the session memory as the
   summary when there is one (session-memory compact).
5. **Reactive levels** while the prompt is still over: 1 trims tool outputs (a fifth of the
   budget, only the 2 newest compactable outputs kept), 2 compacts again keeping a minimal
   tail, 3 is aggressive (every output but the latest answer's cleared, re-injected files
   dropped, the summary cut). A prompt still over the window after level 3 is the ``context``
   error. When the provider answers "context too long" (``overflow``), the level goes up and
   the target drops below what was refused; the engine retries once. The level, the target
   and the retry are in the checkpoint (``cp.context``), so they survive a restart.

Per session, Redis keeps the microcompact boundary, the time of the last call and the previous
request's fingerprints (``rtc:ctx:{<session>}``). Losing them costs one cache miss, never a
wrong prompt.

The shared-prefix ratio is message-level: the tokens of the leading messages (tool list first)
identical to the previous request's, over the prompt's tokens. Providers cache at block
granularity from the first differing byte, so a message that changed anywhere counts as not
shared: a slight underestimate, cheap to compute (per-message fingerprints and counts cached).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from apps.sessions.models import Session
from apps.turns import conversation, prompt, tokens
from apps.turns.compaction import Retention, compact_conversation, files_budget
from apps.turns.llm import ChatModel, Usage
from apps.turns.llm_errors import LLMError
from apps.turns.models import Turn
from apps.turns.profiles import ModelProfile
from rtcagent import keys
from rtcagent.redis import get_redis
from rtcagent.rows import read_ahead, together

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are an agent whose tools run in the user's browser, on the user's device: a virtual "
    "file system (ls, read, write, edit, grep, find), a JavaScript sandbox (script) and "
    "questions to the user (askUser). Read before you edit. Keep answers concise; use Markdown."
)
STATE_TTL = 7 * 24 * 3600
RETRY_SHARE = 0.85  # after "context too long", aim this far below what was refused
# Microcompact at the threshold suffices when it takes the prompt this far below it; otherwise
# the prompt would be back over within a call or two, so auto compact runs as well.
MICROCOMPACT_ROOM = 0.75
# a session with up to this many messages has them read with a build's first reads, summary
# or not (``TurnContext._first_reads``)
PREFETCH_UPTO = 200
# seconds a build's first reads made while waiting for a tool's result stay usable
AHEAD_FRESH = 0.25


@dataclass(frozen=True)
class Level:
    number: int
    tool_share: float  # of the profile's tool_result_budget, per output
    keep: int | None  # compactable outputs kept beyond the sticky boundary (None: all)
    all_tools: bool  # clear every output but the latest answer's, whatever the tool
    minimal_tail: bool  # a compaction at this level keeps a minimal tail
    file_share: float  # of the re-injected files' budget
    summary_share: float | None  # the summary cut to this share of the threshold


LEVELS = (
    Level(0, 1.0, None, False, False, 1.0, None),
    Level(1, 0.2, 2, False, False, 1.0, None),  # trim tool outputs
    Level(2, 0.2, 2, False, True, 0.5, None),  # minimal retention
    Level(3, 0.05, 0, True, True, 0.0, 0.25),  # aggressive
)


@dataclass
class Built:
    """One request as it will be sent, with what accounting needs to know about it."""

    messages: list[dict[str, Any]]
    tokens: int  # our count of the prompt, tools included
    shared_prefix_ratio: float | None  # None: the session's first request
    level: int


def system_text(session: Session, pinned: str) -> str:
    """The stable part of the prompt: changes only with the work mode, never within a turn."""
    text = SYSTEM_PROMPT + f"\nWork mode: {session.work_mode}."
    if session.agent_prompt:
        text += "\n\n" + session.agent_prompt
    if pinned:
        text += "\n\n" + pinned
    return text


# --- counting, with caches (prompts repeat: most of each request was counted before) --------

_counts: dict[str, int] = {}
_cuts: dict[tuple[str, int], str] = {}
_CACHE_MAX = 20_000


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


def message_parts(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
                  ) -> list[tuple[str, int]]:
    """``(fingerprint, tokens)`` of the tool list, then of each message."""
    parts = [_part(tools or [], tools=True)]
    parts += [_part(m) for m in messages]
    return parts


def _part(value: Any, *, tools: bool = False) -> tuple[str, int]:
    fp = prompt.fingerprint(value)
    n = _counts.get(fp)
    if n is None:
        n = _remember(_counts, fp, tokens.count_tools(value) if tools
                      else tokens.count_message(value))
    return fp, n


def _cut(text: str, budget: int) -> str:
    if len(text) * 4 <= budget:  # at most 4 bytes a character, at least a byte a token
        return text
    key = (prompt.fingerprint(text), budget)
    found = _cuts.get(key)
    if found is None:
        found = _remember(_cuts, key, prompt.truncate_output(text, budget, tokens.count_text))
    return found


# --- per-session state in Redis ---------------------------------------------------------------


def _state_key(session_id: object) -> str:
    return keys.context_state(session_id)


FRESH_STATE: dict[str, Any] = {"cleared": 0, "last_call": None, "prev": None}  # no request yet


def _read_state(session_id: object) -> dict[str, Any]:
    raw = get_redis().hgetall(_state_key(session_id))
    value = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
    out: dict[str, Any] = dict(FRESH_STATE)
    try:
        out["cleared"] = int(value.get("cleared") or 0)
        out["last_call"] = float(value["last_call"]) if value.get("last_call") else None
        out["prev"] = orjson.loads(value["prev"]) if value.get("prev") else None
    except (ValueError, orjson.JSONDecodeError):
        log.warning("context state of session %s unreadable; starting afresh", session_id)
    return out


def _write_state(session_id: object, **fields: Any) -> None:
    key = _state_key(session_id)
    mapping = {k: (orjson.dumps(v) if k == "prev" else str(v)) for k, v in fields.items()}
    pipe = get_redis().pipeline()
    pipe.hset(key, mapping=mapping)
    pipe.expire(key, STATE_TTL)
    pipe.execute()


def cleared_upto(session_id: object) -> int:
    """The session's microcompact boundary: outputs up to this offset are sent as placeholders."""
    return int(_read_state(session_id)["cleared"])


# --- building a request -----------------------------------------------------------------------


class TurnContext:
    """The requests of one turn (one instance per run of the turn: memory is read once)."""

    def __init__(
        self,
        *,
        session: Session,
        turn: Turn,
        llm: ChatModel,
        profile: ModelProfile,
        should_cancel: Callable[[], bool] | None = None,
        on_summary_usage: Callable[[Usage], None] | None = None,
        clock: Callable[[], float] = time.time,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        self.session = session
        self.turn = turn
        self.llm = llm
        self.profile = profile
        self.should_cancel = should_cancel
        self.on_summary_usage = on_summary_usage
        self.clock = clock
        self.before_write = before_write  # called before a compaction writes its summary
        # messages of the turn not committed yet, sent as if stored (an early tool result,
        # ``DjangoTurnPorts._take_offer``); a stored row of the same id wins
        self.pending: list[Any] = []
        self._ahead: tuple[float, dict[Any, Any]] | None = None  # see read_ahead
        self._system: str | None = None
        self._recalled: str | None = None
        # the session's state in Redis as this run last wrote it: only a build writes it, and
        # one run at a time builds a session's requests, so the run's later builds skip the read
        self._state: dict[str, Any] | None = None
        self._summarised: bool | None = None  # whether the run's last build found a summary
        self._state_unwritten = False
        self.last: Built | None = None

    # -- the parts that come from memory (read once per run of the turn) --

    def system(self) -> str:
        if self._system is None:
            from apps.memory.prompt import pinned_memory_text

            self._system = system_text(self.session, pinned_memory_text(self.session.user_id))
        return self._system

    def recalled(self) -> str:
        if self._recalled is None:
            from apps.memory.prompt import recalled_memory_text

            self._recalled = recalled_memory_text(
                user_id=self.session.user_id, session_id=str(self.session.id),
                query=self._recall_query())
        return self._recalled

    def _recall_query(self) -> str:
        """The text memories are recalled for: the turn's message."""
        return _text_of(self.turn.trigger_message) if self.turn.trigger_message_id else ""

    # -- the request --

    def build(self, cp: Any, tools: list[dict[str, Any]] | None) -> Built:
        """The next request of the turn whose checkpoint is ``cp`` (see the module docstring).

        Raises the ``context`` ``LLMError`` when even level 3 leaves it over the window."""
        profile = self.profile
        state = self._state if self._state is not None else (
            _read_state(self.session.id) if self.session.last_message_offset > 1
            else dict(FRESH_STATE))  # a session's first message: no request before it
        level = LEVELS[min(3, int(cp.context.get("level", 0)))]
        target = min(profile.compression_threshold,
                     int(cp.context.get("limit") or profile.compression_threshold))
        hard = profile.context_window - profile.max_output_tokens
        ahead, self._ahead = self._ahead, None
        if ahead is not None and self.clock() - ahead[0] > AHEAD_FRESH:
            ahead = None  # too old to stand for now
        # one round trip for the request's short reads (none when read ahead: ``read_ahead``)
        with together(self._first_reads(), ahead=ahead[1] if ahead else None):
            conv = self._load(cp)
            cleared = state["cleared"]
            last_call = state["last_call"]
            if last_call is None or self.clock() - last_call >= profile.cache_cold_seconds:
                cleared = max(cleared, _boundary(conv, profile.keep_recent_tool_results))
            messages, parts = self._assemble(conv, level, cleared, tools)
        # stored from now on, or (an early result) confirmed before any write re-reads them
        self.pending = []
        compacted: set[bool] = set()
        microcompacted = False
        while (n := sum(p[1] for p in parts) + tokens.REPLY_PRIMING) >= target:
            if level.number == 0 and not microcompacted:
                microcompacted = True
                moved = max(cleared, _boundary(conv, profile.keep_recent_tool_results))
                if moved != cleared:  # microcompact first: no LLM call
                    cleared = moved
                    messages, parts = self._assemble(conv, level, cleared, tools)
                    n = sum(p[1] for p in parts) + tokens.REPLY_PRIMING
                    if n < target * MICROCOMPACT_ROOM:
                        continue
                    # Too little room gained: it would fire again at the next call, moving the
                    # prefix each time. Summarise now as well, for a lasting drop.
            if level.minimal_tail not in compacted:
                compacted.add(level.minimal_tail)
                if self._compact(conv, level, cleared):
                    conv = self._load(cp)
                    messages, parts = self._assemble(conv, level, cleared, tools)
                    continue
            if level.number == 3:
                break
            level = LEVELS[level.number + 1]
            log.info("session %s: reactive compact level %d (%d tokens, target %d)",
                     self.session.id, level.number, n, target)
            messages, parts = self._assemble(conv, level, cleared, tools)
        if level.number:
            cp.context["level"] = level.number
        if n >= hard:
            raise LLMError(
                "context", "Conversation too long",
                "The conversation no longer fits in the model's context window, even "
                "compacted. Start a new session, or remove large attachments, and try again.",
                raw_error=f"prompt of {n} tokens, window {profile.context_window}",
            )
        previous = state["prev"]
        shared = prompt.shared_prefix(previous, parts) if previous else None
        ratio = None if shared is None else shared / max(1, n)
        self._state = {"cleared": cleared, "last_call": self.clock(), "prev": parts}
        self._state_unwritten = True  # written once the request is out (``write_state``)
        self.last = Built(messages=messages, tokens=n, shared_prefix_ratio=ratio,
                          level=level.number)
        return self.last

    def read_ahead(self) -> None:
        """While the turn waits for a tool's result: the next build's first reads now, kept
        for it if the result comes within ``AHEAD_FRESH`` seconds (the conversation as of the
        call, plus the result's message, which its taker puts in ``pending``). A read a
        moment older than the result stands for one made after it: edits of the session
        meanwhile are the race they would be anyway. ``discard_ahead`` when the result's
        message cannot be put in ``pending``."""
        self._ahead = (self.clock(), read_ahead(self._first_reads()))

    def discard_ahead(self) -> None:
        self._ahead = None

    def write_state(self) -> None:
        """Store the state the last build left (``_state``) in Redis for the session's next
        run, if not done yet: the turn's ports call it once the request is out, while the
        model thinks, and when the run ends. This run's later builds use it from memory; a
        crash before it leaves the previous build's, which the next run starts from."""
        if self._state_unwritten and self._state is not None:
            _write_state(self.session.id, **self._state)
            self._state_unwritten = False

    def overflow(self, cp: Any) -> bool:
        """The provider refused the last request as too long: go up a level and aim below what
        was refused. False when this answer was retried already (the error stands)."""
        if cp.context.get("retry") == cp.step:
            return False
        refused = self.last.tokens if self.last is not None else self.profile.context_window
        cp.context["retry"] = cp.step
        cp.context["level"] = min(3, int(cp.context.get("level", 0)) + 1)
        cp.context["limit"] = int(refused * RETRY_SHARE)
        log.warning("session %s: the provider refused %d tokens as too long; level %d",
                    self.session.id, refused, cp.context["level"])
        return True

    # -- internals --

    def _first_reads(self) -> list[tuple[str, list[Any]] | None]:
        """The statements a build reads before its first layout, independent of each other:
        the conversation's latest summary, the reminders and, the first time in a run, the
        pinned and the session's memories and the search of the user's memories for the turn's
        message. ``rtcagent.rows.together`` sends them at once
        (one round trip on PostgreSQL, where they were four), and each reader takes its rows.

        With them the whole conversation, which ``conversation.load`` reads when the session
        has no summary: when the run's last build found none, or on its first build when the
        session is short (``PREFETCH_UPTO`` messages, cheap to read even if a summary makes
        them unneeded). A summary found after all makes ``load`` read its tail instead, and
        the rows read here are dropped."""
        from apps.memory import search
        from apps.memory.prompt import session_entries_statement
        from apps.memory.selectors import pinned_statement
        from apps.tasks.hooks import reminders_statement

        reads = [conversation.summary_statement(self.session.id),
                 reminders_statement(self.session.id)]
        if self._summarised is False or (
                self._summarised is None
                and self.session.last_message_offset <= PREFETCH_UPTO):
            reads.append(conversation.all_rows_statement(self.session.id))
        if self._system is None:
            reads.append(pinned_statement(self.session.user_id))
        if self._recalled is None:
            reads.append(session_entries_statement(self.session.id))
            reads.append(search.matches_statement(  # the recalled memories' search
                self.session.user_id, search.query_terms(self._recall_query())))
        return reads

    def _load(self, cp: Any) -> conversation.Conversation:
        conv = conversation.load(self.session, self.turn, turn_steps=cp.step,
                                 pending=self.pending)
        self._summarised = conv.summary is not None
        return conv

    def _compact(self, conv: conversation.Conversation, level: Level, cleared: int) -> bool:
        if self.before_write is not None:
            self.before_write()
        profile = self.profile
        retention = Retention.minimal(profile) if level.minimal_tail else Retention.normal(profile)
        try:
            msg = compact_conversation(
                self.session, conv, llm=self.llm, profile=profile, retention=retention,
                file_share=level.file_share or 0.0, cleared=cleared,
                should_cancel=self.should_cancel,
                on_usage=self.on_summary_usage,
            )
        except LLMError as err:  # no summary this time: the zero-cost levels still apply
            log.warning("session %s: compaction failed (%s); trying the next level",
                        self.session.id, err.category)
            return False
        return msg is not None

    def _assemble(
        self, conv: conversation.Conversation, level: Level, cleared: int,
        tools: list[dict[str, Any]] | None,
    ) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
        from apps.tasks.hooks import prompt_reminders

        # Reminders (goal, todos) are read for every request: a todo list changed mid-turn shows.
        volatile = "\n\n".join(
            t for t in (self.recalled(), *prompt_reminders(self.session.id)) if t
        )
        messages = assemble(conv, level, cleared, profile=self.profile, system=self.system(),
                            recalled=volatile)
        return messages, message_parts(messages, tools)


def assemble(
    conv: conversation.Conversation, level: Level, cleared: int, *, profile: ModelProfile,
    system: str, recalled: str,
) -> list[dict[str, Any]]:
    """The messages of a request: the stable prefix, the conversation as ``level`` sends it
    (outputs up to the microcompact boundary ``cleared`` as placeholders), the volatile tail."""
    budget = max(1, int(profile.tool_result_budget * level.tool_share))
    compactable = sorted(
        r.offset for b in conv.blocks for r in b.results if r.name in prompt.COMPACTABLE_TOOLS
    )
    kept_newest = set(compactable[len(compactable) - level.keep:]) if level.keep else set()
    last_answer = next((b for b in reversed(conv.blocks) if b.kind == "answer"), None)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for block in conv.blocks:
        if block.kind == "files" and level.file_share < 1:
            if level.file_share > 0:
                limit = int(files_budget(profile) * level.file_share)
                messages.append({**block.messages[0],
                                 "content": _cut(block.messages[0]["content"], limit)})
            continue
        if block.kind == "summary" and level.summary_share:
            limit = int(profile.compression_threshold * level.summary_share)
            messages.append({**block.messages[0],
                             "content": _cut(block.messages[0]["content"], limit)})
            continue
        out = list(block.messages)
        for r in block.results:
            if level.all_tools:  # whatever the tool: only the latest answer's outputs stay
                clear = block is not last_answer
            else:
                clear = r.name in prompt.COMPACTABLE_TOOLS and (
                    r.offset <= cleared
                    or (level.keep is not None and r.offset not in kept_newest)
                )
            content = prompt.placeholder(r.name) if clear else _cut(r.output, budget)
            if content != out[r.index]["content"]:
                out[r.index] = {**out[r.index], "content": content}
        messages += out
    if recalled:
        messages.append({"role": "system", "content": recalled})
    return messages


def _boundary(conv: conversation.Conversation, keep: int) -> int:
    """Offset of the newest compactable output to clear so that ``keep`` stay (0: none)."""
    offsets = sorted(
        r.offset for b in conv.blocks for r in b.results if r.name in prompt.COMPACTABLE_TOOLS
    )
    return offsets[-keep - 1] if len(offsets) > keep else 0


def _text_of(message: Any) -> str:
    data = (message.content or {}).get("data") if message is not None else None
    if isinstance(data, dict):
        return str(data.get("text", ""))
    return data if isinstance(data, str) else ""


def session_prompt_tokens(session: Session, profile: ModelProfile) -> int:
    """Our count of the session's next prompt as it stands (after a compaction): the stable
    prefix, the conversation as level 0 sends it, and the tools."""
    from apps.memory.prompt import pinned_memory_text
    from apps.turns.runner import tools_for

    messages = assemble(
        conversation.load(session), LEVELS[0], _read_state(session.id)["cleared"],
        profile=profile, system=system_text(session, pinned_memory_text(session.user_id)),
        recalled="",
    )
    return sum(p[1] for p in message_parts(messages, tools_for(session))) + tokens.REPLY_PRIMING
