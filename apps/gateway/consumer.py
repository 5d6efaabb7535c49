"""The realtime gateway: a Centrifuge protocol v2 (JSON) server on ``/connection/websocket``.

One consumer per WebSocket. It decodes frames, authenticates, runs RPC handlers from the
registry (each in one thread hop, as concurrent tasks), and delivers the user's two server-side
channels:

* ``topic:u=<id>``: recoverable and positioned. Publications reach the consumer through the
  channel layer (at most once, possibly out of order when transactions commit out of order);
  the consumer delivers offsets strictly in order, ``last + 1`` at a time. A hole is first
  waited for (``REORDER_WAIT``), then read from PostgreSQL, then settled by the gap filler; a
  hole that stays, or an epoch change, closes the connection with 3010 so the client reconnects
  and recovers. Every tick (``apps.gateway.ticks``, one per process and ping interval) also
  compares the committed watermark with ``last``, so a publication whose bell was lost is
  still delivered.
* ``live:u=<id>``: not recoverable (LLM chunks): frames from the live bus
  (``apps.gateway.livebus``, Redis pub/sub) are forwarded as they come, already encoded; the
  channel-layer group is still joined for other senders.

Nothing is pushed before the connect reply: publications arriving meanwhile are buffered.
Terminal closes send ``push.disconnect`` first, since Daphne (``RTC_WEB_SERVER=daphne``) drops
close reasons.

Slow clients: the server (``rtcagent.serve``, either server) buffers whatever a client does not
read, without bound, and ASGI does not show that buffer. A pong proves the client read
everything sent before its ping, so the bytes sent since the last answered ping bound what can
be waiting in it. Past ``SLOW_CLIENT_BYTES`` a probe ping goes out at once; without its pong (or
any progress) within ``PONG_TIMEOUT``, or past four times the limit, the connection is closed
with 3008 (slow; the client reconnects and recovers from its offset). The connect reply (its
recovered publications are bounded by ``RECOVERY_LIMIT``) counts as read.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DataError

from apps.ops.metrics import rpc_timed
from rtcagent import keys
from rtcagent.conf import rtc_setting, wire_limits
from rtcagent.errors import InvalidRequest, RtcError

from . import livebus, presence, recovery, registry, stream, ticks
from . import protocol as P
from .auth import Identity, TokenRejected, authenticate, identity_valid
from .groups import group_add_many, group_discard_many, sync_joiner

log = logging.getLogger(__name__)

MAX_INFLIGHT_RPC = 32


def db_hop(fn: Any) -> Any:
    """One thread hop into the ORM, on a pool thread: not asgiref's single shared thread, which
    would run every connection's database work of the process one call at a time."""
    return database_sync_to_async(fn, thread_sensitive=False)


def connect_state(identity: Identity, hint: Any, join: Callable[[Any], None] | None
                  ) -> recovery.TopicStart | None:
    """At connect, in one thread hop: None when the token is no longer valid (one read), else
    the channel-layer groups joined (``join``, when given: in the same Redis round trip as the
    position, and before it, so no bell rung after the position was read is missed), then where
    the user's topic starts and what the client missed (``recovery.topic_start``)."""
    if not identity_valid(identity):
        return None
    return recovery.topic_start(identity.user_id, hint, after=join)


def origin_allowed(origin: str, host: str) -> bool:
    """Browsers must come from an allowed origin or the server's own; non-browsers send none."""
    if not origin:
        return True
    if origin in settings.RTC_ALLOWED_ORIGINS or "*" in settings.RTC_ALLOWED_ORIGINS:
        return True
    return urlsplit(origin).netloc == host


class GatewayConsumer(AsyncWebsocketConsumer):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """channels' ``AsyncConsumer.__call__`` with a cheaper way of waiting on two sources.

        channels' ``await_many_dispatch`` wraps the next message of each source (the socket and
        the channel layer) in a new task and ``asyncio.wait``s on both, for every message: the
        larger part of the Python work an idle socket's pong costs (docs/performance.md). Here
        one long-lived task per source reads and dispatches; a lock keeps dispatch one message
        at a time, as channels does, and a source is read again only once its last message was
        dispatched. The first pump to end (``StopConsumer`` on disconnect, or an error) ends the
        consumer and cancels the other; a channel layer that fails is ``_layer_failed``.
        """
        self.scope = scope
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            self.channel_receive = functools.partial(self.channel_layer.receive,
                                                     self.channel_name)
        self.base_send = send
        turn = asyncio.Lock()
        pumps = [asyncio.create_task(self._pump(receive, turn))]
        if self.channel_layer is not None:
            pumps.append(asyncio.create_task(self._pump(self.channel_receive, turn, layer=True)))
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # what ended it: StopConsumer, or an error to raise
        except StopConsumer:
            pass
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            if not getattr(self, "closed", True):  # ended by an error: leave the ticker, the
                # live bus and the groups as a disconnect does
                self.closed = True
                with contextlib.suppress(Exception):
                    await self._cleanup()

    async def _pump(self, source: Callable[[], Any], turn: asyncio.Lock, *,
                    layer: bool = False) -> None:
        while True:
            try:
                message = await source()
            except Exception:
                if not layer:
                    raise
                await self._layer_failed(turn)
                continue
            async with turn:
                await self.dispatch(message)

    async def _layer_failed(self, turn: asyncio.Lock) -> None:
        """The channel layer's receive failed (Redis away). Before the connect, read it again
        a moment later: the connect meets Redis too and answers with a temporary error. A
        connected socket may have lost its group memberships with Redis's data, so it is closed
        with 3004, a code clients reconnect on (channels would end the consumer with an
        exception, a 1011 close)."""
        async with turn:
            if self.identity is None and not self.closed:
                log.warning("channel layer receive failed before connect; retrying")
            else:
                log.exception("channel layer receive failed; closing the connection")
                await self.disconnect_with(P.DISCONNECT_SERVER_ERROR)
                raise StopConsumer
        await asyncio.sleep(1.0)

    async def connect(self) -> None:
        presence.opened(self)
        self.identity: Identity | None = None
        self.connecting = False
        self.connect_replied = False
        self.client_id = str(uuid.uuid4())
        self.closed = False
        self.rpc_tasks: set[asyncio.Task[None]] = set()
        self.timers: list[asyncio.Task[None]] = []
        self.groups_joined: list[str] = []
        self.pre_connect: list[dict[str, Any]] | None = []
        self.awaiting_pong = False
        self.sent_bytes = 0  # everything sent so far, pings included
        self.ping_marks: collections.deque[int] = collections.deque()  # sent_bytes at each ping
        self.acked_bytes = 0  # sent_bytes at the last ping the client answered
        self.probe: asyncio.Task[None] | None = None
        self.slow_limit = int(rtc_setting("SLOW_CLIENT_BYTES"))  # read once: checked per frame
        self.topic_epoch = ""
        self.topic_last = 0
        self.topic_buffer: dict[int, Any] = {}
        self.hole_task: asyncio.Task[None] | None = None
        self.live_joined: int | None = None  # the user whose live bus frames this socket gets
        # Refuse inside the protocol, never with an HTTP 403 (clients retry those forever).
        await self.accept()
        headers = dict(self.scope.get("headers") or [])
        origin = headers.get(b"origin", b"").decode("latin-1")
        host = headers.get(b"host", b"").decode("latin-1")
        if not origin_allowed(origin, host):
            await self.disconnect_with(P.DISCONNECT_PERMISSION_DENIED, "origin not allowed")
            return
        self.timers.append(asyncio.create_task(self._connect_deadline()))

    async def dispatch(self, message: dict[str, Any]) -> None:
        """channels' dispatch without its ``aclose_old_connections()`` before every message: a
        hop to asgiref's one shared sync thread per frame (every pong, RPC and bell of every
        connection of the process, one at a time) to close database connections of that thread,
        which this consumer never uses: its database work runs in ``db_hop``, which closes old
        connections around each call itself (docs/performance.md)."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    # --- transport ---------------------------------------------------------------------------

    async def send_objs(self, *objs: dict[str, Any]) -> None:
        if objs and not self.closed:
            await self._send_text(P.encode(*objs), ping=objs[0] == {})

    async def _send_text(self, text: str, *, ping: bool = False) -> None:
        await self.send(text_data=text)
        self.sent_bytes += len(text)  # characters: a lower bound of the bytes, good enough
        if ping:
            self.ping_marks.append(self.sent_bytes)
        await self._check_backlog()

    async def send_live(self, text: str) -> None:
        """A ``live:u=<id>`` frame from the live bus, already encoded (``apps.gateway.livebus``)."""
        if not self.closed and self.identity is not None:
            await self._send_text(text)

    async def _check_backlog(self) -> None:
        limit = self.slow_limit
        unread = self.sent_bytes - self.acked_bytes
        if unread <= limit or self.identity is None:
            return
        if unread > 4 * limit:
            await self._close_slow(unread)
        elif self.probe is None:
            self.probe = asyncio.create_task(self._probe())

    async def _probe(self) -> None:
        """Ask for a pong now; a client that does not read cannot answer it."""
        mark_before = self.acked_bytes
        await self.send_objs({})
        target = self.sent_bytes
        await asyncio.sleep(float(rtc_setting("PONG_TIMEOUT")))
        self.probe = None
        if self.acked_bytes < target and self.acked_bytes == mark_before:
            await self._close_slow(self.sent_bytes - self.acked_bytes)

    async def _close_slow(self, unread: int) -> None:
        uid = self.identity.user_id if self.identity else None
        log.warning("closing a slow connection of user %s: %d bytes unread", uid, unread)
        await self.disconnect_with(P.DISCONNECT_SLOW)

    def _pong(self) -> None:
        self.awaiting_pong = False
        if self.ping_marks:
            self.acked_bytes = self.ping_marks.popleft()

    async def disconnect_with(self, code: int, reason: str = "") -> None:
        if self.closed:
            return
        reason = (reason or P.DISCONNECT_REASONS.get(code, ""))[:120]
        with contextlib.suppress(Exception):
            await self.send(text_data=P.encode(P.disconnect_push(code, reason)))
        self.closed = True
        await self.close(code=code, reason=reason)
        await self._cleanup()

    async def disconnect(self, code: int) -> None:
        presence.closed(self)
        self.closed = True
        await self._cleanup()

    async def _cleanup(self) -> None:
        current = asyncio.current_task()
        for task in [*self.timers, *self.rpc_tasks, self.hole_task, self.probe]:
            if task is not None and task is not current:
                task.cancel()
        ticks.ticker().discard(self)
        await self._leave_bus()
        await self._leave_groups()

    async def _leave_bus(self) -> None:
        if self.live_joined is not None:
            uid, self.live_joined = self.live_joined, None
            with contextlib.suppress(Exception):
                await livebus.bus().leave(uid, self)

    async def _leave_groups(self) -> None:
        groups, self.groups_joined = self.groups_joined, []
        if groups:
            with contextlib.suppress(Exception):
                await group_discard_many(self.channel_layer, groups, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.closed:
            return
        if text_data is None:
            await self.disconnect_with(P.DISCONNECT_BAD_REQUEST, "binary frames not supported")
            return
        if len(text_data.encode()) > rtc_setting("MAX_FRAME_BYTES"):
            await self.disconnect_with(P.DISCONNECT_BAD_REQUEST, "frame too large")
            return
        try:
            commands = P.parse_frame(text_data, max_commands=rtc_setting("MAX_COMMANDS_PER_FRAME"))
            for cmd in commands:
                if self.closed:
                    return
                await self._dispatch(cmd)
        except P.ProtocolViolation as exc:
            await self.disconnect_with(exc.code, exc.reason)

    async def _dispatch(self, cmd: P.Command) -> None:
        if cmd.method == "":
            self._pong()
            return
        if cmd.method == "send":
            return  # async messages are not used by this server
        if self.identity is None:
            if cmd.method != "connect":
                raise P.ProtocolViolation(reason="bad request: connect first")
            await self._connect(cmd)
            return
        if cmd.method == "connect":
            raise P.ProtocolViolation(reason="bad request: already connected")
        if cmd.method in ("rpc", "history"):
            if len(self.rpc_tasks) >= MAX_INFLIGHT_RPC:
                await self.send_objs(
                    P.error(cmd.id, P.ERR_TOO_MANY_REQUESTS, "too many requests", temporary=True)
                )
                return
            run = self._rpc if cmd.method == "rpc" else self._history
            task = asyncio.create_task(run(cmd))
            self.rpc_tasks.add(task)
            task.add_done_callback(self.rpc_tasks.discard)
        elif cmd.method == "refresh":
            await self._refresh(cmd)
        elif cmd.method == "unsubscribe":
            await self.send_objs(P.reply(cmd.id, "unsubscribe", {}))
        elif cmd.method == "subscribe":
            await self.send_objs(
                P.error(
                    cmd.id, P.ERR_PERMISSION_DENIED, "permission denied: channels are server-side"
                )
            )
        else:  # publish, presence, presence_stats, sub_refresh, ping
            await self.send_objs(P.error(cmd.id, P.ERR_NOT_AVAILABLE, "not available"))

    # --- connect / refresh -------------------------------------------------------------------

    async def _connect_deadline(self) -> None:
        await asyncio.sleep(rtc_setting("CONNECT_TIMEOUT"))
        if self.identity is None and not self.connecting:  # a slow connect is not a missing one
            await self.disconnect_with(P.DISCONNECT_BAD_REQUEST, "bad request: no connect")

    async def _connect(self, cmd: P.Command) -> None:
        self.connecting = True
        try:
            await self._do_connect(cmd)
        except Exception:  # Redis or the database away: a temporary error, the client retries
            log.exception("connect failed")
            if self.connect_replied:
                # The client holds a connect reply and believes it is connected: close with a
                # code it reconnects on, never leave it on a socket that would refuse its next
                # command with 3501 (which clients take as final).
                await self.disconnect_with(P.DISCONNECT_SERVER_ERROR)
                return
            await self._leave_groups()
            await self._leave_bus()
            self.identity = None
            self.pre_connect = []  # what the bus delivered meanwhile is the next connect's
            await self.send_objs(
                P.error(cmd.id, P.ERR_INTERNAL, "internal server error", temporary=True)
            )
        finally:
            self.connecting = False

    async def _do_connect(self, cmd: P.Command) -> None:
        try:
            identity = authenticate(cmd.params.get("token"))
        except TokenRejected as exc:
            if exc.expired:
                await self.send_objs(P.error(cmd.id, P.ERR_TOKEN_EXPIRED, "token expired"))
                return
            await self.disconnect_with(P.DISCONNECT_INVALID_TOKEN)
            return
        uid = identity.user_id
        # The bus (topic bells, live frames) before the position is read, so that no bell rung
        # after it is missed; what arrives before the reply waits in ``pre_connect``.
        self.live_joined = uid  # left on any failure or close from here on
        await livebus.bus().join(uid, self)
        groups = [keys.user_group(uid)]
        self.groups_joined = groups  # likewise
        join = sync_joiner(self.channel_layer, groups, self.channel_name)
        if join is None:
            await group_add_many(self.channel_layer, groups, self.channel_name)
        subs = cmd.params.get("subs") if isinstance(cmd.params.get("subs"), dict) else {}
        topic = keys.topic_channel(uid)
        if not self.closed:
            start = await db_hop(connect_state)(identity, subs.get(topic), join)
        if self.closed:  # the socket went away meanwhile: its cleanup may have run before the
            self.groups_joined, self.live_joined = groups, uid  # joins landed: leave them again
            await self._leave_groups()
            await self._leave_bus()
            return
        if start is None:
            await self.disconnect_with(P.DISCONNECT_INVALID_TOKEN)
            return
        self.identity = identity
        self.topic_epoch, self.topic_last = start.epoch, start.last
        result: dict[str, Any] = {
            "client": self.client_id,
            "version": "rtcagent/1",
            "ping": int(rtc_setting("PING_INTERVAL")) or 1,
            "pong": True,
            "data": {"user_id": uid, "limits": wire_limits()},
            "subs": {
                topic: start.as_subscribe_result(),
                keys.live_channel(uid): {"recoverable": False, "positioned": False},
            },
        }
        result.update(self._expiry_fields())
        await self.send_objs(P.reply(cmd.id, "connect", result))
        self.connect_replied = True  # what fails from here on closes with 3004 (``_connect``)
        self.acked_bytes = self.sent_bytes
        if not self.closed:
            ticks.ticker().add(self)
        buffered, self.pre_connect = self.pre_connect or [], None
        for event in buffered:
            await self._on_topic_bell(event)
        self.timers.append(asyncio.create_task(self._expiry_watch()))

    def _expiry_fields(self) -> dict[str, Any]:
        assert self.identity is not None
        if not self.identity.exp:
            return {}
        return {"expires": True, "ttl": max(1, int(self.identity.exp - time.time()))}

    async def _refresh(self, cmd: P.Command) -> None:
        assert self.identity is not None
        try:
            identity = authenticate(cmd.params.get("token"))
        except TokenRejected as exc:
            code = P.DISCONNECT_EXPIRED if exc.expired else P.DISCONNECT_INVALID_TOKEN
            await self.disconnect_with(code)
            return
        if identity.user_id != self.identity.user_id:
            await self.disconnect_with(P.DISCONNECT_INVALID_TOKEN, "token of another user")
            return
        try:
            valid = await db_hop(identity_valid)(identity)
        except Exception:  # the database away: the client retries its refresh, the socket stays
            log.exception("refresh failed for user %s", identity.user_id)
            await self.send_objs(
                P.error(cmd.id, P.ERR_INTERNAL, "internal server error", temporary=True)
            )
            return
        if not valid:
            await self.disconnect_with(P.DISCONNECT_INVALID_TOKEN)
            return
        self.identity = identity
        await self.send_objs(
            P.reply(cmd.id, "refresh", {"client": self.client_id, **self._expiry_fields()})
        )

    async def _expiry_watch(self) -> None:
        grace = rtc_setting("EXPIRED_CLOSE_DELAY")
        while self.identity is not None and self.identity.exp:
            wait = self.identity.exp + grace - time.time()
            if wait <= 0:
                await self.disconnect_with(P.DISCONNECT_EXPIRED)
                return
            await asyncio.sleep(min(wait, 60))

    # --- ping / pong and watermark poll -------------------------------------------------------

    def no_pong(self) -> None:
        """No pong within ``PONG_TIMEOUT`` of a ping (``apps.gateway.ticks`` pings): 3012."""
        self._spawn(self.disconnect_with(P.DISCONNECT_NO_PONG))

    def on_tick(self, identity: Identity, valid: bool | None, pos: Any) -> None:
        """The process-wide tick's answers for this connection (``apps.gateway.ticks``).

        The user may have been deleted, deactivated or had its tokens revoked since connect: the
        bell of ``events.disconnect_user`` may be lost (the channel layer is at most once), so
        every tick asks the database too (``valid``; None when the read failed, which keeps the
        connection). ``pos`` is the topic's position: an epoch change closes with 3010, a
        watermark past what was delivered starts the hole repair (a lost bell). Called for every
        connection of the process at once, so it acts in tasks and only when there is something
        to do."""
        if self.closed or self.identity is not identity:
            return  # refreshed meanwhile: the next tick checks the new token
        if valid is False:
            self._spawn(self.disconnect_with(P.DISCONNECT_INVALID_TOKEN, "token no longer valid"))
            return
        if pos is None:
            return
        if pos.epoch != self.topic_epoch:
            self._spawn(self.disconnect_with(P.DISCONNECT_INSUFFICIENT_STATE))
        elif pos.watermark > self.topic_last and self.hole_task is None:
            self.hole_task = asyncio.create_task(self._fix_holes(upto=pos.watermark, wait=0))

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self.timers.append(task)

    # --- topic delivery and control messages --------------------------------------------------

    async def topic_bell(self, event: dict[str, Any]) -> None:
        """A topic publication's bell from the live bus (``livebus.ring_bell``)."""
        await self._on_topic_bell(event)

    async def user_disconnect(self, event: dict[str, Any]) -> None:
        fid = event.get("fid")
        if fid and (self.identity is None or self.identity.fid != fid):
            return  # another login (refresh-token family) of the same user
        await self.disconnect_with(
            int(event.get("code", P.DISCONNECT_FORCE)), event.get("reason", "")
        )

    async def _on_topic_bell(self, event: dict[str, Any]) -> None:
        if self.pre_connect is not None:
            self.pre_connect.append(event)
            return
        assert self.identity is not None
        if event["epoch"] != self.topic_epoch:
            await self.disconnect_with(P.DISCONNECT_INSUFFICIENT_STATE)
            return
        offset = int(event["offset"])
        if offset <= self.topic_last:
            return
        self.topic_buffer[offset] = event["data"]
        await self._drain_topic()
        if self.topic_buffer and self.hole_task is None:
            self.hole_task = asyncio.create_task(self._fix_holes())

    async def _drain_topic(self) -> None:
        assert self.identity is not None
        channel = keys.topic_channel(self.identity.user_id)
        out = []
        while self.topic_last + 1 in self.topic_buffer:
            self.topic_last += 1
            out.append(
                P.publication_push(channel, self.topic_buffer.pop(self.topic_last), self.topic_last)
            )
        for stale in [o for o in self.topic_buffer if o <= self.topic_last]:
            del self.topic_buffer[stale]
        await self.send_objs(*out)

    async def _fix_holes(self, upto: int = 0, wait: float | None = None) -> None:
        """Fill the hole before the buffered offsets from the database, then from the gap filler."""
        assert self.identity is not None
        uid = self.identity.user_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + rtc_setting("GAP_GRACE") + 10
        try:
            await asyncio.sleep(rtc_setting("REORDER_WAIT") if wait is None else wait)
            while not self.closed:
                target = max([upto, *self.topic_buffer])
                if target <= self.topic_last:
                    return
                rows = await db_hop(stream.read_raw)(
                    uid, self.topic_epoch, self.topic_last, target
                )
                for offset, raw in rows:
                    self.topic_buffer.setdefault(offset, orjson.Fragment(raw))
                await self._drain_topic()
                if self.topic_last >= target:
                    return
                if loop.time() > deadline:
                    await self.disconnect_with(P.DISCONNECT_INSUFFICIENT_STATE)
                    return
                await db_hop(stream.fill_gaps)(uid)
                await asyncio.sleep(0.5)
        except Exception:  # the next bell or ping tick tries again
            log.exception("repairing the topic of user %s failed", uid)
        finally:
            self.hole_task = None

    # --- rpc and history ---------------------------------------------------------------------

    @rpc_timed
    async def _rpc(self, cmd: P.Command) -> None:
        assert self.identity is not None
        method = cmd.params.get("method")
        try:
            if not isinstance(method, str):
                raise P.ProtocolViolation(reason="bad request: rpc method must be a string")
            handler = registry.get_handler(method)
            ctx = registry.RpcContext(
                user_id=self.identity.user_id,
                client=self.client_id,
                device_id=self.identity.device_id,
            )
            data = cmd.params.get("data")
            result = await db_hop(handler)(ctx, {} if data is None else data)
            await self.send_objs(P.reply(cmd.id, "rpc", {"data": result}))
        except P.ProtocolViolation as exc:
            await self.disconnect_with(exc.code, exc.reason)
        except RtcError as exc:
            await self.send_objs(P.app_error(cmd.id, exc))
        except DataError:  # a value the database refuses: retrying cannot help, so permanent
            log.warning("rpc %s: the database refused a value", method, exc_info=True)
            await self.send_objs(P.app_error(cmd.id, InvalidRequest(
                "a value in the request cannot be stored (too long or malformed)")))
        except Exception:
            log.exception("rpc %s failed", method)
            await self.send_objs(
                P.error(cmd.id, P.ERR_INTERNAL, "internal server error", temporary=True)
            )

    async def _history(self, cmd: P.Command) -> None:
        assert self.identity is not None
        uid = self.identity.user_id
        if cmd.params.get("channel") != keys.topic_channel(uid):
            await self.send_objs(P.error(cmd.id, P.ERR_PERMISSION_DENIED, "permission denied"))
            return
        limit = cmd.params.get("limit", 0)
        since = cmd.params.get("since")
        if not isinstance(limit, int) or (since is not None and not isinstance(since, dict)):
            await self.send_objs(P.error(cmd.id, P.ERR_BAD_REQUEST, "bad request"))
            return
        since_pos = None
        if since:
            offset = since.get("offset", 0) or 0
            if isinstance(offset, bool) or not isinstance(offset, int):
                await self.send_objs(P.error(cmd.id, P.ERR_BAD_REQUEST, "bad request"))
                return
            since_pos = (offset, str(since.get("epoch", "")))
        try:
            result = await db_hop(recovery.history)(
                uid, since=since_pos, limit=limit
            )
        except LookupError:
            await self.send_objs(
                P.error(cmd.id, P.ERR_UNRECOVERABLE_POSITION, "unrecoverable position")
            )
            return
        except Exception:
            log.exception("history failed for user %s", uid)
            await self.send_objs(
                P.error(cmd.id, P.ERR_INTERNAL, "internal server error", temporary=True)
            )
            return
        await self.send_objs(P.reply(cmd.id, "history", result))
