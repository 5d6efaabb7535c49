"""Interrupting a live call's turn in whichever worker process streams it, at once.

The stop flag in Redis (``apps.turns.state``) is polled between chunks at most every 0.2 s and
only when a chunk arrives; a call's input must cut the answer sooner than that, even while the
model has not sent anything yet. So the input also publishes the turn id on one Redis pub/sub
channel (``keys.live_interrupts``); every worker process that runs a live turn listens on it
with one thread, and the process streaming that turn fires its ``Watch``: the flag the turn's
``should_cancel`` reads is set, and the model's HTTP response is aborted (its socket shut down,
which wakes the blocked read at once; ``apps.turns.llm``).

A lost publication (Redis restarted, the listener reconnecting) costs only latency: the flag in
Redis stops the turn at its next poll, as for any stop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable

import redis
from django.conf import settings

from rtcagent import keys
from rtcagent.redis import get_redis

log = logging.getLogger(__name__)


class Watch:
    """One live turn's interrupt switch in this process."""

    def __init__(self) -> None:
        self.fired = threading.Event()
        self.next_text = ""  # the input that cut the turn, when its publication carried it
        self._abort: Callable[[], None] | None = None
        self._lock = threading.Lock()

    def set_abort(self, abort: Callable[[], None] | None) -> None:
        """The way to drop the model's response now open (None: no response open)."""
        with self._lock:
            self._abort = abort
            if abort is not None and self.fired.is_set():
                abort()

    def fire(self, text: str = "") -> None:
        if text:
            self.next_text = text
        self.fired.set()
        with self._lock:  # held while aborting: ``set_abort(None)`` waits, so a response
            abort = self._abort  # that has closed is never aborted after it was released
            if abort is not None:
                try:
                    abort()
                except Exception:  # the stream ends anyway at the flag's next check
                    log.exception("aborting a live turn's model response failed")


_watches: dict[str, Watch] = {}
_lock = threading.Lock()
_listener: threading.Thread | None = None
_ready = threading.Event()


def watch(turn_id: str) -> Watch:
    """Start watching ``turn_id`` in this process (and make sure the listener runs)."""
    _ensure_listening()
    with _lock:
        w = _watches.get(turn_id)
        if w is None:
            w = _watches[turn_id] = Watch()
        return w


def unwatch(turn_id: str) -> None:
    with _lock:
        _watches.pop(turn_id, None)


def interrupt(turn_id: str, text: str = "") -> None:
    """Ask the process streaming ``turn_id`` to drop its stream now (best effort); ``text`` is
    the input that cuts it, which that process may send to the model ahead of the next turn
    (``apps.live.ports``)."""
    try:
        get_redis().publish(keys.live_interrupts(),
                            json.dumps({"turn": turn_id, "text": text}, ensure_ascii=False))
    except redis.RedisError:
        log.warning("live interrupt of turn %s not published; the stop flag will do", turn_id)


def _fire(payload: str) -> None:
    try:
        data = json.loads(payload)
        turn_id, text = str(data["turn"]), str(data.get("text") or "")
    except (ValueError, KeyError, TypeError):
        turn_id, text = payload, ""
    with _lock:
        w = _watches.get(turn_id)
    if w is not None:
        w.fire(text)


def listen() -> None:
    """Start this process's listener now (a worker at start-up), not at its first live turn."""
    _ensure_listening()


def _ensure_listening() -> None:
    global _listener
    started = False
    with _lock:
        if _listener is None or not _listener.is_alive():
            _ready.clear()
            _listener = threading.Thread(target=_listen, name="live-interrupts", daemon=True)
            _listener.start()
            started = True
    if started:  # subscribed before the first turn streams (else: the flag's latency)
        _ready.wait(2.0)


def _listen() -> None:
    """Subscribe and fire watches, forever; reconnect after a Redis failure."""
    while True:
        client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True,
                                      socket_keepalive=True, health_check_interval=30)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(keys.live_interrupts())
            _ready.set()
            pinged = time.monotonic()
            while True:
                message = pubsub.get_message(timeout=5.0)
                if message is not None and message.get("type") == "message":
                    _fire(str(message.get("data")))
                if time.monotonic() - pinged > 30:  # a half-open socket fails here
                    pubsub.ping()
                    pinged = time.monotonic()
        except redis.RedisError as exc:
            log.warning("live interrupt listener lost Redis (%s); reconnecting", exc)
        except Exception:
            log.exception("live interrupt listener failed; restarting")
        finally:
            _ready.clear()
            with contextlib.suppress(Exception):  # already gone
                pubsub.close()
                client.close()
        time.sleep(0.5)
