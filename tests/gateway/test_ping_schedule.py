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


async def test_connections_are_spread_over_the_slots_and_leave_them() -> None:
    ticker = ticks.Ticker()
    conns = [_Conn() for _ in range(3 * ticks.PING_SLOTS)]
    try:
        for conn in conns:
            ticker.add(conn)
        assert [len(slot) for slot in ticker.slots] == [3] * ticks.PING_SLOTS
        for conn in conns[: ticks.PING_SLOTS]:
            ticker.discard(conn)
        assert [len(slot) for slot in ticker.slots] == [2] * ticks.PING_SLOTS
        assert not ticker.slot_of.keys() & set(conns[: ticks.PING_SLOTS])
    finally:
        for task in (ticker.task, ticker.pinger):
            if task is not None:
                task.cancel()
        await asyncio.gather(ticker.task, ticker.pinger, return_exceptions=True)


async def test_each_socket_is_pinged_once_per_interval(settings) -> None:
    settings.RTCAGENT = {**settings.RTCAGENT, "PING_INTERVAL": 0.4, "PONG_TIMEOUT": 0.3}
    ticker = ticks.Ticker()
    conns = [_Conn() for _ in range(2 * ticks.PING_SLOTS)]
    try:
        for conn in conns:
            ticker.add(conn)
        await asyncio.sleep(1.0)  # two and a half intervals
    finally:
        ticker.pinger.cancel()
        ticker.task.cancel()
        await asyncio.gather(ticker.task, ticker.pinger, return_exceptions=True)
    assert {c.pings for c in conns} <= {2, 3}
    assert sum(c.no_pongs for c in conns) > 0  # none of them answered
