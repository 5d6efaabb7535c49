"""Fixtures for the gateway: the real web process (``rtcagent.serve``) on the test database and
the official Python client."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from centrifuge import (
    Client,
    ClientEventHandler,
    ConnectedContext,
    ConnectingContext,
    DisconnectedContext,
    ErrorContext,
    ServerPublicationContext,
    ServerSubscribedContext,
    ServerUnsubscribedContext,
)

from tests.livesrv import LiveServer, start_daphne

PING = 2  # seconds: a short ping interval so keep-alive is exercised within a test


@pytest.fixture(scope="session")
def gateway(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    server = start_daphne(
        tmp_path_factory.mktemp("daphne"),
        RTC_PING_INTERVAL=str(PING),
        RTC_PONG_TIMEOUT="1",
        RTC_REORDER_WAIT="0.3",
        RTC_GAP_GRACE="1",
        RTC_MAX_FRAME_BYTES=str(64 * 1024),
    )
    yield server
    server.stop()


class Recorder(ClientEventHandler):
    """Records every client event; ``wait_for`` awaits a condition on them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.publications: dict[str, list[Any]] = {}
        self.changed = asyncio.Event()

    def _add(self, kind: str, ctx: Any) -> None:
        self.events.append((kind, ctx))
        self.changed.set()

    async def on_connecting(self, ctx: ConnectingContext) -> None:
        self._add("connecting", ctx)

    async def on_connected(self, ctx: ConnectedContext) -> None:
        self._add("connected", ctx)

    async def on_disconnected(self, ctx: DisconnectedContext) -> None:
        self._add("disconnected", ctx)

    async def on_error(self, ctx: ErrorContext) -> None:
        self._add("error", ctx)

    async def on_subscribed(self, ctx: ServerSubscribedContext) -> None:
        self._add("subscribed", ctx)

    async def on_unsubscribed(self, ctx: ServerUnsubscribedContext) -> None:
        self._add("unsubscribed", ctx)

    async def on_publication(self, ctx: ServerPublicationContext) -> None:
        self.publications.setdefault(ctx.channel, []).append(ctx.pub)
        self._add("publication", ctx)

    def of(self, kind: str) -> list[Any]:
        return [ctx for k, ctx in self.events if k == kind]

    def subscribed(self, channel: str) -> list[ServerSubscribedContext]:
        return [c for c in self.of("subscribed") if c.channel == channel]

    async def wait_for(self, cond: Any, within: float = 10.0) -> None:
        async def loop() -> None:
            while not cond():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), within)


def make_client(server: LiveServer, token: str = "", **kwargs: Any) -> tuple[Client, Recorder]:
    rec = Recorder()
    client = Client(server.ws_url, events=rec, token=token, proxy=None, **kwargs)
    return client, rec


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path
