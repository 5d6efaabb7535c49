"""The worker: claims sessions from the queue and runs their turns (``manage.py rtc_worker``).

A worker process runs up to ``WORKER_TURNS`` sessions at once (``RTC_WORKER_TURNS``, default
4), one per *turn thread*: each thread claims a session, drains it (resume items before
messages) while a background thread renews that session's lease, and after ``max_items``
yields the session so others get their turn. A session is only ever held by one thread of one
process (the queue's lock), so several turns per process change nothing a turn sees; turns
spend most of their time waiting on the model, so threads are enough. Each thread has its own
database connection (closed when it ends) and shares the process's model client and Redis pool.

Once a second one worker of the deployment sweeps (its main thread; the workers take turns
through a Redis key): requeues the work of dead workers, fills topic gaps, times out RTCs past
their deadline, and re-enqueues turns that nobody is running. While no turn
thread holds a session it runs queued memory extractions, given back the moment one has work.
On SIGTERM every turn thread finishes its current item (a turn ends or pauses at its next tool
call), hands its session back and ends.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import redis
from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.models import Exists, OuterRef
from django.utils import timezone

from apps.accounts.services import tokens_purge
from apps.attachments.services import attachments_purge_deleted
from apps.gateway import livebus, stream
from apps.gateway.events import item
from apps.live.ports import ports_for
from apps.live.services import input_skipped, take_in_earlier_inputs
from apps.ops import processes
from apps.ops.selectors import price_statement
from apps.rtc.models import TERMINAL_RTC_STATUSES, Rtc
from apps.sessions.models import Message, Session
from apps.sessions.serializers import message_to_dict
from apps.storage.cleanup import orphans_purge, unsent_uploads_purge
from apps.storage.credentials import credentials_purge_expired
from apps.turns import engine, queue, state
from apps.turns.llm import ChatModel, OpenAIChat
from apps.turns.llm_errors import LLMError
from apps.turns.models import ACTIVE_TURN_STATUSES, TERMINAL_TURN_STATUSES, Turn, TurnStatus
from apps.turns.profiles import current_model
from apps.turns.runner import (
    DjangoTurnPorts,
    EarlyResultVoid,
    HoldLost,
    TurnEnded,
    publish_turn,
)
from apps.turns.serializers import turn_to_dict
from rtcagent import layer
from rtcagent.conf import rtc_setting
from rtcagent.redis import get_redis
from rtcagent.rows import Columns, read, split, together

log = logging.getLogger(__name__)

SWEEP_EVERY = 1.0  # seconds between two sweeps of the deployment (``Worker.sweep_if_due``)
SWEEP_KEY = "rtc:sweep:due"  # held by the worker that swept last, a little under SWEEP_EVERY


def _connection_ready() -> None:
    """Open this thread's persistent database connection while it waits for work (again once
    ``CONN_MAX_AGE`` closed it), so that a turn does not open one, a new PostgreSQL backend
    and its set-up round trips, before its model request. A database that is away is the next
    turn's problem, not the idle loop's."""
    if connection.settings_dict.get("CONN_MAX_AGE") == 0:
        return  # closed after every item anyway
    try:
        connection.ensure_connection()
    except DatabaseError as exc:
        log.debug("database not reachable while idle: %r", exc)


_TURN_WITH_SESSION = (Columns(Turn, "t"), Columns(Session, "s"), Columns(Message, "tm"))


@functools.cache
def _turn_with_session_sql() -> str:
    turn, session, message = _TURN_WITH_SESSION
    return (f"SELECT {turn.sql()}, {session.sql()}, {message.sql()} "  # noqa: S608
            f"FROM {Turn._meta.db_table} t "
            f"JOIN {Session._meta.db_table} s ON s.id = t.session_id "
            f"LEFT JOIN {Message._meta.db_table} tm ON tm.id = t.trigger_message_id "
            "WHERE t.id = %s AND t.session_id = %s")


def _turn_with_session_statement(turn_id: object, session_id: object
                                  ) -> tuple[str, list[Any]] | None:
    try:
        keys = [Turn._meta.pk.get_db_prep_value(uuid.UUID(str(turn_id)), connection),
                Session._meta.pk.get_db_prep_value(uuid.UUID(str(session_id)), connection)]
    except ValueError:
        return None
    return _turn_with_session_sql(), keys


def _turn_with_session(turn_id: object, session_id: object) -> Turn | None:
    """The turn with its session and its message (the prompt recalls memories for its
    text), in one hand-written statement (``rtcagent.rows``): on the path of every new
    message's first chunk, where the ORM's ``select_related`` cost several times its run to
    compile."""
    statement = _turn_with_session_statement(turn_id, session_id)
    found = read(*statement) if statement is not None else []
    if not found:
        return None
    turn, session, message = split(found[0], _TURN_WITH_SESSION)
    turn.session = session
    turn.trigger_message = message
    return turn


class Worker:
    def __init__(
        self,
        *,
        llm_factory: Callable[[], ChatModel] = OpenAIChat.from_settings,
        lease_ms: int | None = None,
        max_items: int = 20,
        turns: int | None = None,
    ) -> None:
        self.llm_factory = llm_factory
        self.lease_ms = lease_ms or int(rtc_setting("WORKER_LEASE_MS"))
        self.max_items = max_items
        self.turns = max(1, int(turns or rtc_setting("WORKER_TURNS")))
        self.stopping = threading.Event()
        self._local = threading.local()  # the hold of the calling turn thread
        self._lock = threading.Lock()
        self._pruned_at = 0.0
        self.items_done = 0  # for the heartbeat (the system page)
        self.claims = 0  # sessions taken by turn threads so far (idle work gives way to them)
        self.holding: dict[int, str] = {}  # turn thread -> the session it holds

    @property
    def _hold(self) -> queue.Hold | None:
        """The hold of the session the calling thread is draining (None outside ``drain``)."""
        return getattr(self._local, "hold", None)

    @_hold.setter
    def _hold(self, hold: queue.Hold | None) -> None:
        self._local.hold = hold

    @property
    def current_session(self) -> str | None:
        """One session this worker holds (the first claimed), or None when idle."""
        with self._lock:
            return next(iter(self.holding.values()), None)

    # --- main loop --------------------------------------------------------------------------

    def run(self) -> None:
        log.info("worker started (lease %d ms, %d turns at once)", self.lease_ms, self.turns)
        # A thread, not this loop: a long turn would silence it. Its failures stay in it.
        heartbeat = processes.Reporter("worker", self.heartbeat)
        heartbeat.start()
        # Loops keep time while this loop is inside a long turn: their scheduler has a thread.
        from apps.tasks.scheduler import run_forever

        scheduler = threading.Thread(target=run_forever, args=(self.stopping,), daemon=True,
                                     name="loop-scheduler")
        scheduler.start()
        while not self.stopping.is_set():  # a worker started while the database is down waits
            try:
                self.recover()
                break
            except Exception:
                log.exception("start-up recovery failed; retrying in a second")
                close_old_connections()
                time.sleep(1)
        self.warm_up()
        slots = [threading.Thread(target=self.turn_thread, name=f"turns-{n}", daemon=True)
                 for n in range(self.turns)]
        for slot in slots:
            slot.start()
        last_sweep = 0.0
        while not self.stopping.is_set():
            close_old_connections()
            if time.monotonic() - last_sweep >= SWEEP_EVERY:
                self.sweep_if_due()
                last_sweep = time.monotonic()
            try:
                # Between sessions (no turn thread holds one): one queued memory extraction,
                # given back the moment a session has work.
                if self.idle_threads() == self.turns and self.extract_memory():
                    continue
            except Exception:  # Redis or the database away: the next round tries again
                log.exception("memory extraction failed; retrying in a second")
            self.stopping.wait(max(0.0, 1.0 - (time.monotonic() - last_sweep)))
        for slot in slots:  # each finishes its item and hands its session back
            slot.join()
        heartbeat.stop()
        scheduler.join(timeout=5)
        connection.close()
        layer.flush()  # the last control messages (disconnects, sent without waiting)
        livebus.sync()  # and this thread's last bells (the sweep's gap fills)
        log.info("worker stopped")

    @staticmethod
    def warm_up() -> None:
        """What the first turn would otherwise pay before its model request: the tokenizer
        (0.3-2.8 s to build, docs/performance.md), the model SDK's import (0.3 s) and the
        live-call interrupt listener."""
        import importlib

        from apps.live import interrupts
        from apps.turns import tokens

        for what, fn in (("tokenizer", tokens.encoding),
                         ("model SDK", lambda: importlib.import_module("openai")),
                         ("interrupt listener", interrupts.listen)):
            try:
                fn()
            except Exception:  # the first turn that needs it tries again
                log.exception("warming up the %s failed", what)

    def turn_thread(self) -> None:
        """One turn at a time: claim a session, drain it, again, until the worker stops."""
        try:
            while not self.stopping.is_set():
                close_old_connections()
                try:
                    hold = queue.claim(lease_ms=self.lease_ms, take=True)
                    if hold is None:
                        _connection_ready()
                        queue.wait_for_bell(1)
                        continue
                    self.drain(hold)
                except Exception:  # Redis or the database away: the lease and the sweep recover
                    log.exception("worker loop error; retrying in a second")
                    self.stopping.wait(1)
        finally:
            connection.close()  # this thread's own connection
            # its last bells' replies, so that its Redis socket never closes with unread data
            # (Linux answers that with a reset, which may drop what the server had not read)
            livebus.sync()

    def idle_threads(self) -> int:
        """How many turn threads hold no session."""
        with self._lock:
            return self.turns - len(self.holding)

    def extract_memory(self) -> bool:
        """Run one queued session-memory extraction (``apps.memory.extraction``); False when
        none was queued."""
        from apps.memory import extraction

        waiting = extraction.SessionsWaiting()
        claims = self.claims
        # A turn thread that took a session since the extraction began: a turn quicker than
        # the gap between two polls (the stream's chunks) has come and gone, but the
        # extraction still gives way, and runs again after it with that turn's messages.
        return extraction.run_next(
            self.llm_factory,
            should_yield=lambda: (self.stopping.is_set() or self.idle_threads() < self.turns
                                  or self.claims != claims or waiting()),
        )

    def heartbeat(self) -> dict[str, Any]:
        with self._lock:
            sessions = list(self.holding.values())
            done = self.items_done
        return {"session": sessions[0] if sessions else None, "sessions": sessions,
                "turns": self.turns, "items_done": done}

    def drain(self, hold: queue.Hold) -> None:
        done = threading.Event()

        def renew() -> None:
            while not done.wait(self.lease_ms / 3000):
                try:
                    if not hold.renew():
                        log.warning("lost the lease of session %s", hold.session_id)
                        return
                except Exception:  # a Redis hiccup must not let the lease run out
                    log.exception("renewing the lease of session %s failed", hold.session_id)

        renewer = threading.Thread(target=renew, daemon=True)
        renewer.start()
        me = threading.get_ident()
        with self._lock:
            self.holding[me] = hold.session_id
            self.claims += 1
        try:
            for _ in range(self.max_items):
                work = hold.take()
                if work is None:
                    return
                self._hold = hold
                try:
                    self.handle(hold.session_id, work)
                except HoldLost:  # not acked: the item belongs to the session's new holder
                    log.warning("lost session %s mid-item; leaving it to the new holder",
                                hold.session_id)
                    return
                except (OperationalError, InterfaceError):
                    if connection.is_usable():
                        log.exception("work item %s of session %s failed", work, hold.session_id)
                    else:  # the database went away: keep the item (it goes back to the head of
                        # its list, unacknowledged) and let the loop pause before trying again
                        log.exception("database lost during item %s of session %s; keeping it",
                                      work, hold.session_id)
                        connection.close()
                        hold.yield_session()
                        raise
                except Exception:
                    log.exception("work item %s of session %s failed", work, hold.session_id)
                finally:
                    self._hold = None
                hold.ack()
                with self._lock:
                    self.items_done += 1
                if self.stopping.is_set():
                    break
            hold.yield_session()
        finally:
            with self._lock:
                self.holding.pop(me, None)
            done.set()
            renewer.join()

    # --- items ------------------------------------------------------------------------------

    def handle(self, session_id: str, work: dict[str, Any]) -> None:
        if work.get("kind") == "message":
            self.start_turn(session_id, work)
        elif work.get("kind") == "compact":
            from apps.turns.compaction import compact

            compact(session_id, str(work.get("instruction") or ""), self.llm_factory())
        elif work.get("kind") == "resume":
            turn = Turn.objects.filter(pk=work.get("turn_id")).first()
            if turn is None or turn.status in TERMINAL_TURN_STATUSES:
                if not Turn.objects.filter(session_id=session_id,
                                           status__in=ACTIVE_TURN_STATUSES).exists():
                    queue.unpark(session_id)
                return
            self.run_turn(turn)

    def start_turn(self, session_id: str, work: dict[str, Any]) -> None:
        if work.get("turn_id"):  # created with its message, pending (``message_send``)
            self._carry_on(session_id, work["turn_id"])
            return
        msg = Message.objects.filter(pk=work.get("message_id")).first()
        if msg is None:
            return
        if msg.turn_id is not None:  # redelivered after a crash: carry on with that turn
            self._carry_on(session_id, msg.turn_id)
            return
        if msg.client_id.startswith("subagent:") and _stopped_subagent(session_id):
            return  # stopped before its turn began: it never runs
        empty = engine.Checkpoint().to_json()
        try:
            with transaction.atomic():
                live = msg.client_id.startswith("live:")
                if live and input_skipped(msg):
                    return  # a newer input cut it before it started, or its call stopped
                # Created running, with its (empty) checkpoint and the session made active, in
                # one transaction and one Update: the model request is not kept waiting for a
                # second commit. A stop from now on finds it running and raises the flag the
                # turn polls before its first model call. Another open turn of the session makes
                # the insert fail (the constraint turn_one_active_per_session).
                turn = Turn.objects.create(
                    session_id=session_id, user_id=msg.user_id, client_id=msg.client_id,
                    status=TurnStatus.RUNNING, started_at=timezone.now(), trigger_message=msg,
                )
                msg.turn = turn
                msg.save(update_fields=["turn", "updated_at"])
                if live:
                    take_in_earlier_inputs(msg, turn)
                state.checkpoint_store(str(turn.id), empty)
                session = publish_turn(turn, before=[
                    (item("turn", "created", turn.id), turn_to_dict(turn)),
                    (item("message", "updated", msg.id), message_to_dict(msg)),
                ])
        except IntegrityError:
            # Another turn of this session is still open: this message waits behind it.
            queue.requeue_front(session_id, work)
            park_session(session_id)
            return
        state.checkpoint_cache(str(turn.id), empty)
        # A live call's turn may have taken in earlier inputs: its messages are counted.
        self.run_turn(turn, checkpoint=empty, session=session, messages=None if live else 1)

    def _carry_on(self, session_id: str, turn_id: object) -> None:
        """Run the message's turn that exists already, unless it ended. A pending one never
        ran: nothing of it is written but its message."""
        # the turn with its session and the deployment model's price row (its profile, which
        # the ports read first): one round trip (``rtcagent.rows.together``)
        with together([_turn_with_session_statement(turn_id, session_id),
                       price_statement(current_model())]):
            turn = _turn_with_session(turn_id, session_id)
            if turn is not None and turn.status not in TERMINAL_TURN_STATUSES:
                fresh = turn.status == TurnStatus.PENDING
                self.run_turn(turn, session=turn.session, messages=1 if fresh else None)

    def run_turn(self, turn: Turn, *, checkpoint: dict[str, Any] | None = None,
                 session: Session | None = None, messages: int | None = None) -> None:
        """Run the turn from its checkpoint (``checkpoint`` when the caller has it, else
        Redis's copy, or PostgreSQL's when Redis lost it). ``session``: its row, when the
        caller has just written it (else the ports read it). ``messages``: the caller has just
        created the turn, with that many messages (``DjangoTurnPorts.began_here``).

        A Redis that refuses the checkpoint's copy (``state.CheckpointNotCached``) ends this run
        with the turn still ``running``: the sweeper resumes it from PostgreSQL."""
        hold = self._hold
        ports = ports_for(turn, self.llm_factory(), lambda: bool(hold and hold.lost), session)
        # a browser tool's quick result continues the turn here (``await_result``); only under
        # a queue hold, whose wake-ups it waits on (not when a caller runs an item directly)
        ports.hold = hold if isinstance(hold, queue.Hold) else None
        ports.stopping = self.stopping
        ports.result_wait = float(rtc_setting("RESULT_WAIT"))
        ports.early_results = bool(rtc_setting("EARLY_RESULTS"))
        if messages is not None:
            ports.began_here(messages=messages)
        try:
            self._run_turn(turn, ports, checkpoint)
        finally:
            close = getattr(ports, "close", None)
            if close is not None:
                close()

    def _run_turn(self, turn: Turn, ports: DjangoTurnPorts,
                  checkpoint: dict[str, Any] | None = None) -> None:
        if checkpoint is None and turn.status == TurnStatus.PENDING:
            # never started: it has no checkpoint (its first write, a save included, moves it
            # to running and stores one: ``DjangoTurnPorts.save``, ``_start``), so it begins
            # from nothing without asking Redis and PostgreSQL
            checkpoint = engine.Checkpoint().to_json()
        saved = checkpoint if checkpoint is not None else state.checkpoint_load(str(turn.id))
        if saved is None:
            ports.fail(LLMError(
                category="system", title="Turn state lost",
                message="The server has no saved state for this turn, neither in Redis "
                        "nor in the database. Send the message again to retry.",
                retryable=True, raw_error="checkpoint missing",
            ))
            queue.unpark(str(turn.session_id))
            return
        ports.preload(saved)  # engine.advance loads it: not read twice
        if turn.stop_requested_at is not None:  # Redis may have lost the flag: the loop polls it
            state.restore_stop(str(turn.id))
        try:
            if not ports.begin():
                raise TurnEnded(str(turn.id))
            outcome = engine.advance(ports)
        except TurnEnded:  # stopped (or finished) before the run's first write: not begun
            if ports.turn.status in TERMINAL_TURN_STATUSES:
                state.checkpoint_delete(str(turn.id))
            queue.unpark(str(turn.session_id))
            return
        except EarlyResultVoid:  # nothing of it written: the turn waits for its RTC
            ports.abandon_early_result()
            outcome = engine.WAITING
        finally:
            ports.settle(quiet=True)  # an answer left unaccounted by an exception
            # what waited for a request that never went out (the turn paused or ended); a
            # failure leaves the previous prompt state, or resume items whose run finds the
            # turn ahead of it
            ports.after_run(quiet=True)
        # Finished or paused: maybe queue a memory extraction (it runs later, between sessions).
        _isolated("memory extraction trigger", turn.session_id, _maybe_extract, turn.session_id)
        if outcome != engine.WAITING:
            queue.unpark(str(turn.session_id))
            return
        park_session(str(turn.session_id))
        # A stop asked while the call was being created; PostgreSQL's word, whatever Redis lost.
        # Not for a live call's turn: its flag is an interrupt, which waits for the tool; but
        # a call stopped meanwhile (hung up) stops it, tool or not.
        if getattr(ports, "waits_out_tools", False):
            stopped = ports.hung_up()  # type: ignore[attr-defined]
        else:
            stopped = state.stop_requested(str(turn.id), durable=True)
        if stopped:
            from apps.turns.services import turn_stop

            turn_stop(user_id=turn.user_id, session_id=turn.session_id)

    # --- housekeeping -----------------------------------------------------------------------

    def recover(self) -> None:
        """Start-up: turns left running by a dead process are resumed (or failed). Interrupted
        turns whose RTC finished are the first sweep's (``resume_orphans``)."""
        for turn in Turn.objects.filter(status__in=[TurnStatus.RUNNING, TurnStatus.PENDING]):
            _isolated("recover turn", turn.id, self._nudge, turn)

    def sweep_if_due(self) -> bool:
        """The loop's sweep, by one worker of the deployment each ``SWEEP_EVERY`` (whichever
        takes ``SWEEP_KEY`` first), so that housekeeping's queries do not grow with the number
        of worker processes (each swept every second before: five statements, about 5 ms of
        CPU, docs/performance.md). Redis away: this worker sweeps what it can."""
        try:
            due = bool(get_redis().set(SWEEP_KEY, "1", nx=True,
                                       px=int(SWEEP_EVERY * 1000 * 0.9)))
        except redis.RedisError:
            due = True
        if due:
            self.sweep()
        return due

    def sweep(self) -> None:
        """Each step runs on its own: one that fails (Redis away, one bad row) is logged and the
        others still run, so a single user's broken state never stops housekeeping for all."""
        steps: list[tuple[str, Callable[[], object]]] = [
            ("requeue dead holders", queue.sweep),
            ("fill topic gaps", stream.fill_all_gaps),
            ("expire RTCs", expire_rtcs),
            ("resume orphans", self.resume_orphans),
            ("requeue dead memory extractions", _sweep_extractions),
            ("finish sub-agents whose turn ended", _sweep_subagents),
        ]
        if time.monotonic() - self._pruned_at > 600:  # every 10 minutes
            self._pruned_at = time.monotonic()
            retention = float(rtc_setting("TOPIC_RETENTION_HOURS")) * 3600
            steps.append(("prune topics", lambda: stream.prune(older_than=retention)))
            steps.append(("purge expired tokens", tokens_purge))
            steps.append(("purge expired S3 credentials", credentials_purge_expired))
            steps.append(("purge attachments of deleted messages", attachments_purge_deleted))
            steps.append(("purge objects of deleted users", orphans_purge))
            steps.append(("purge uploads no message names", unsent_uploads_purge))
        for name, step in steps:
            try:
                step()
            except Exception:
                log.exception("sweep step %r failed", name)

    def resume_orphans(self) -> None:
        """Turns nobody runs: interrupted on a finished RTC, or running without a holder.

        Their queue items live only in Redis; the turns are in the database. So whatever Redis
        lost (restarted empty, an item dropped by a dead process, a checkpoint write refused),
        every such turn is found here and enqueued again; a turn waiting on an open RTC needs no
        item until its result, timeout or rejection enqueues one."""
        quiet = timezone.now() - timedelta(seconds=rtc_setting("ORPHAN_AFTER"))
        open_rtc = Rtc.objects.filter(turn_id=OuterRef("pk")).exclude(
            status__in=TERMINAL_RTC_STATUSES
        )
        # a turn waiting on its sync sub-agents is resumed by their ends, not polled
        from apps.tasks.models import SubAgent, SubAgentStatus

        children = SubAgent.objects.filter(parent_turn_id=OuterRef("pk"), mode="sync",
                                           status=SubAgentStatus.RUNNING)
        waiting = Turn.objects.filter(
            status=TurnStatus.INTERRUPTED, updated_at__lt=quiet
        ).exclude(Exists(open_rtc)).exclude(Exists(children))
        for turn in waiting:
            _isolated("nudge turn", turn.id, self._nudge, turn)
        running = [TurnStatus.RUNNING, TurnStatus.PENDING]
        for turn in Turn.objects.filter(status__in=running, updated_at__lt=quiet):
            _isolated("nudge turn", turn.id, self._nudge, turn)
        self.queue_orphan_messages(quiet)

    @staticmethod
    def queue_orphan_messages(quiet: Any) -> None:
        """User messages whose queue item was lost (the process died between commit and
        enqueue): no turn, not queued, nobody holding the session."""
        orphans = (
            Message.objects.filter(role="user", turn__isnull=True, created_at__lt=quiet,
                                   deleted_at__isnull=True, session__deleted_at__isnull=True)
            .exclude(client_id="")
            .exclude(client_id__startswith="turn:")
            .exclude(session__sub_agent__status="stopped")
            .exclude(session__live_call__status="stopped")
            .order_by("session_id", "global_offset")
        )
        for msg in orphans[:200]:
            sid = str(msg.session_id)
            work = queue.pending(sid)
            if queue.is_held(sid) or work["msg"] or work["inflight"]:
                continue
            queue.enqueue_message(sid, msg.id)

    @staticmethod
    def _nudge(turn: Turn) -> None:
        sid = str(turn.session_id)
        work = queue.pending(sid)
        if queue.is_held(sid) or work["resume"]:
            return
        if turn.status == TurnStatus.PENDING and (work["msg"] or work["inflight"]):
            return  # created with its message (``message_send``), whose queued item runs it
        # The owner too: after Redis lost its data no enqueue may have recorded it yet.
        queue.enqueue_resume(sid, turn.id, user_id=turn.user_id)


def _stopped_subagent(session_id: str) -> bool:
    from apps.tasks.models import SubAgent, SubAgentStatus

    return SubAgent.objects.filter(session_id=session_id,
                                   status=SubAgentStatus.STOPPED).exists()


def park_session(session_id: str) -> None:
    """Park the session, then let the database judge: a turn stopped meanwhile has already
    unparked, so without an open turn the park is undone (messages must not wait forever)."""
    queue.park(session_id)
    if not Turn.objects.filter(session_id=session_id, status__in=ACTIVE_TURN_STATUSES).exists():
        queue.unpark(session_id)


def expire_rtcs() -> int:
    """RTCs past their deadline become ``timeout`` and their turn resumes."""
    from apps.rtc.services import rtc_timeout

    count = 0
    due = Rtc.objects.filter(deadline__lt=timezone.now()).exclude(
        status__in=TERMINAL_RTC_STATUSES
    ).values_list("id", flat=True)
    for rtc_id in list(due):
        count += _isolated("time out RTC", rtc_id, rtc_timeout, rtc_id=rtc_id) or 0
    return count


def _maybe_extract(session_id: object) -> None:
    from apps.memory.extraction import maybe_extract

    maybe_extract(str(session_id))


def _sweep_subagents() -> None:
    from apps.tasks.subagents import sweep

    sweep(float(rtc_setting("ORPHAN_AFTER")))


def _sweep_extractions() -> None:
    from apps.memory import jobs

    jobs.sweep()


def _isolated(what: str, ident: object, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one sweep action for one row; a failure is logged and the sweep goes on."""
    try:
        return fn(*args, **kwargs)
    except Exception:
        log.exception("sweep: %s %s failed", what, ident)
        return None
