"""The process's ping schedule (``apps.gateway.ticks``): slots, failed sends, missing pongs.

The end-to-end behaviour (a silent client closed with 3012, a ponging one kept) is in
``test_frames``; these check what a server with thousands of sockets relies on and a test
through one socket cannot show."""

from __future__ import annotations

import asyncio

from apps.gateway import ticks


class _Conn:
    def __init__(self, *, fails: bool = False) -> None:
        self.fails = fails
        self.closed = False
        self.awaiting_pong = False
        self.pings = 0
        self.no_pongs = 0
        self.identity = None

    async def send_objs(self, *objs: dict) -> None:
        if self.fails:
            raise ConnectionResetError("the socket went away")
        assert objs == ({},)
        self.pings += 1

    def no_pong(self) -> None:
        self.no_pongs += 1


async def test_a_ping_that_cannot_be_sent_skips_only_its_socket() -> None:
    conns = [_Conn(), _Conn(fails=True), _Conn()]
    pinged = await ticks.Ticker.ping(conns)
    assert pinged == [conns[0], conns[2]]
    assert [c.pings for c in conns] == [1, 0, 1]
    assert [c.awaiting_pong for c in conns] == [True, False, True]


async def test_only_sockets_still_waiting_for_their_pong_are_closed() -> None:
    answered, silent, gone = _Conn(), _Conn(), _Conn()
    pinged = await ticks.Ticker.ping([answered, silent, gone])
    answered.awaiting_pong = False  # its pong came
    gone.closed = True
    ticks.Ticker.expect_pongs(pinged)
    assert (answered.no_pongs, silent.no_pongs, gone.no_pongs) == (0, 1, 0)


async def _stopped(ticker: ticks.Ticker) -> None:
    for task in (ticker.task, ticker.pinger):
        if task is not None:
            task.cancel()
    await asyncio.gather(*(t for t in (ticker.task, ticker.pinger) if t is not None),
                         return_exceptions=True)


async def test_a_connection_joins_the_slot_pinged_last_and_leaves_it() -> None:
    ticker = ticks.Ticker()
    early, late = _Conn(), _Conn()
    try:
        ticker.add(early)
        ticker.last_pinged = 3  # as the pinger does when it pings slot 3
        ticker.add(late)
        assert early in ticker.slots[ticks.PING_SLOTS - 1] and late in ticker.slots[3]
        ticker.discard(early)
        ticker.discard(late)
        assert not any(ticker.slots) and not ticker.slot_of
    finally:
        await _stopped(ticker)


async def test_the_first_ping_comes_one_interval_after_the_connect_then_every_interval(
    settings,
) -> None:
    interval = 2.0  # 20 slots of 100 ms; the checks below keep clear of their edges
    settings.RTCAGENT = {**settings.RTCAGENT, "PING_INTERVAL": interval, "PONG_TIMEOUT": 1.0}
    loop = asyncio.get_running_loop()
    ticker = ticks.Ticker()
    first = _Conn()

    async def until(intervals: float) -> None:
        await asyncio.sleep(max(0.0, start + intervals * interval - loop.time()))

    try:
        start = loop.time()
        ticker.add(first)  # pinged at 1.0, 2.0, ... intervals
        await until(0.385)
        later = [_Conn() for _ in range(5)]  # join the slot pinged at 0.35: pinged at 1.35
        for conn in later:
            ticker.add(conn)
        await until(0.9)
        assert first.pings == 0 and all(c.pings == 0 for c in later)
        await until(1.1)
        assert first.pings == 1 and all(c.pings == 0 for c in later)
        await until(1.45)
        assert all(c.pings == 1 for c in later)
        await until(2.15)
        assert first.pings == 2 and all(c.pings == 1 for c in later)
        # nobody answered: each ping's check came PONG_TIMEOUT (0.5 intervals) after it
        assert first.no_pongs == 1 and all(c.no_pongs == 1 for c in later)
    finally:
        await _stopped(ticker)
