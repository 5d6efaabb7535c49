"""The bare baselines, each the simplest program doing the same unavoidable work as ours.

``python -m bench.bare echo|relay|floor|replay --port P [--llm URL] [--db URL] [--ping S]``

* ``echo``: a ``websockets`` server sending every message back (the RPC and idle baselines).
* ``relay``: WebSocket in, the same HTTP client (``openai``, one per process) to the same scripted
  model, the same publication frames out (the chunk and sustained-turns baselines); a tool call
  checkpoints the conversation to Redis and sends the RTC frame (tool pause), a result reads and
  deletes it and posts to the model (tool resume).
* ``replay``: reads a user's stored publications from PostgreSQL (``psycopg``) and sends the same
  history frames (the replay baseline).
* ``floor``: the relay made durable, an informational baseline beside the official ones (the
  *durable floor*): before the model is asked it commits the message and its Update row in one
  PostgreSQL transaction; a pause commits the call's message, the RTC, the checkpoint and an
  Update row in one transaction before the RTC frame is sent; a result commits the RTC's
  result, the result's message and an Update row, and reads the checkpoint back, before the
  model is asked. One ``psycopg`` connection, plain SQL, tables of its own in the schema
  ``bench_floor`` (made at start, dropped by the runner at the end). It tells how much of what
  ours costs over the bare relay is the durability itself.

All run without compression, like the web process.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import orjson
from websockets.asyncio.server import ServerConnection, serve


async def echo(ws: ServerConnection) -> None:
    async for message in ws:
        await ws.send(message)


FLOOR_SCHEMA = "bench_floor"
_FLOOR_TABLES = """
CREATE SCHEMA bench_floor;
CREATE TABLE bench_floor.message (id uuid PRIMARY KEY, session_id text NOT NULL,
    role text NOT NULL, data jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE bench_floor.rtc (id uuid PRIMARY KEY, call_id text UNIQUE NOT NULL,
    parameters jsonb NOT NULL, result jsonb, status text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE bench_floor.checkpoint (call_id text PRIMARY KEY, data jsonb NOT NULL,
    saved_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE bench_floor.event (id bigserial PRIMARY KEY, user_id integer NOT NULL,
    data jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
"""


class Floor:
    """The durable floor's writes (module docstring): one transaction each, on one connection
    (the cases that use it run one turn at a time)."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.conn: Any = None
        self.lock = asyncio.Lock()

    async def open(self) -> None:
        import psycopg

        self.conn = await psycopg.AsyncConnection.connect(self.db_url, autocommit=True)
        await self.conn.execute(f"DROP SCHEMA IF EXISTS {FLOOR_SCHEMA} CASCADE")
        await self.conn.execute(_FLOOR_TABLES)
        await self.conn.set_autocommit(False)

    async def _write(self, statements: list[tuple[str, tuple[Any, ...]]]) -> Any:
        """Run ``statements`` in one transaction; the last one's first row."""
        from psycopg.types.json import Jsonb

        async with self.lock, self.conn.transaction():
            row = None
            for sql, args in statements:
                cur = await self.conn.execute(
                    sql, tuple(Jsonb(a) if isinstance(a, dict | list) else a for a in args))
                row = await cur.fetchone() if cur.description else None
            return row

    async def message(self, ask: dict[str, Any]) -> None:
        """A new user message: the message and its Update."""
        data = {"type": "user_message", "data": {"text": ask["text"]}}
        await self._write([
            ("INSERT INTO bench_floor.message (id, session_id, role, data) "
             "VALUES (gen_random_uuid(), %s, 'user', %s)", (ask["sid"], data)),
            ("INSERT INTO bench_floor.event (user_id, data) VALUES (1, %s)",
             ({"items": [{"type": "message", "action": "created"}], "data_list": [data]},)),
        ])

    async def pause(self, sid: str, call: dict[str, Any], messages: list[Any]) -> None:
        """A browser tool call: its message, the RTC, the checkpoint and their Update."""
        params = orjson.loads(call["args"] or "{}")
        data = {"type": "toolcall_input", "data": {"id": call["id"], "tool_name": call["name"],
                                                   "input": call["args"]}}
        await self._write([
            ("INSERT INTO bench_floor.message (id, session_id, role, data) "
             "VALUES (gen_random_uuid(), %s, 'assistant', %s)", (sid, data)),
            ("INSERT INTO bench_floor.rtc (id, call_id, parameters, status) "
             "VALUES (gen_random_uuid(), %s, %s, 'pending')", (call["id"], params)),
            ("INSERT INTO bench_floor.checkpoint (call_id, data) VALUES (%s, %s)",
             (call["id"], messages)),
            ("INSERT INTO bench_floor.event (user_id, data) VALUES (1, %s)",
             ({"items": [{"type": "message", "action": "created"},
                         {"type": "rtc", "action": "created"}],
               "data_list": [data, {"tool_call_id": call["id"], "parameters": params}]},)),
        ])

    async def resume(self, ask: dict[str, Any]) -> list[Any]:
        """A tool's result: applied once (a conditional UPDATE), its message and Update; the
        checkpoint read back."""
        data = {"type": "toolcall_output", "data": {"id": ask["resume"],
                                                    "output": ask["result"]}}
        row = await self._write([
            ("UPDATE bench_floor.rtc SET status = 'completed', result = %s, updated_at = now() "
             "WHERE call_id = %s AND status = 'pending'", ({"text": ask["result"]},
                                                          ask["resume"])),
            ("INSERT INTO bench_floor.message (id, session_id, role, data) "
             "VALUES (gen_random_uuid(), %s, 'tool', %s)", (ask["sid"], data)),
            ("INSERT INTO bench_floor.event (user_id, data) VALUES (1, %s)",
             ({"items": [{"type": "message", "action": "created"}], "data_list": [data]},)),
            ("SELECT data FROM bench_floor.checkpoint WHERE call_id = %s", (ask["resume"],)),
        ])
        return list(row[0])


def relay_handler(llm_url: str, redis_url: str, floor: Floor | None = None) -> Any:
    """The bare relay; with ``floor``, the durable floor (module docstring)."""
    import openai
    import redis.asyncio as aioredis

    # Retries as the SDK's default (a refused or reset connection before any answer), like the
    # worker's own bounded retries: without them one lost connection hung the sustained case.
    client = openai.AsyncOpenAI(api_key="sk-bench", base_url=llm_url, max_retries=2)
    store = aioredis.from_url(redis_url)

    def frame(channel: str, data: dict[str, Any]) -> str:
        return orjson.dumps({"push": {"channel": channel, "pub": {"data": data}}}).decode()

    async def turn(ws: ServerConnection, ask: dict[str, Any]) -> None:
        messages = [{"role": "system", "content": "bench"},
                    {"role": "user", "content": ask["text"]}]
        if "resume" in ask:  # a tool result: the checkpoint back from Redis, then the model
            if floor is not None:
                saved = await floor.resume(ask)
            else:
                async with store.pipeline(transaction=False) as pipe:
                    raw, _ = await pipe.get(ask["resume"]).delete(ask["resume"]).execute()
                saved = orjson.loads(raw)
            messages = [*saved, {"role": "tool", "tool_call_id": ask["resume"],
                                 "content": ask["result"]}]
        elif floor is not None:
            await floor.message(ask)
        stream = await client.chat.completions.create(
            model="scripted-model", stream=True, stream_options={"include_usage": True},
            messages=messages)
        seq, calls = 0, {}
        async for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    seq += 1
                    await ws.send(frame("live:u=1", {
                        "type": "chunk", "session_id": ask["sid"], "turn_id": ask["sid"],
                        "message_id": ask["sid"], "kind": "markdown", "delta": delta.content,
                        "seq": seq}))
                for part in delta.tool_calls or []:
                    slot = calls.setdefault(part.index, {"id": "", "name": "", "args": ""})
                    slot["id"] = part.id or slot["id"]
                    if part.function is not None:
                        slot["name"] += part.function.name or ""
                        slot["args"] += part.function.arguments or ""
        for call in calls.values():  # a pause: checkpoint the conversation, tell the browser
            messages.append({"role": "assistant", "tool_calls": [{
                "id": call["id"], "type": "function",
                "function": {"name": call["name"], "arguments": call["args"]}}]})
            if floor is not None:
                await floor.pause(ask["sid"], call, messages)
            else:
                await store.set(call["id"], orjson.dumps(messages), ex=600)
            await ws.send(frame("topic:u=1", {"type": "rtc", "tool_call_id": call["id"],
                                              "tool_name": call["name"],
                                              "parameters": orjson.loads(call["args"]),
                                              "status": "pending"}))
        await ws.send(frame("live:u=1", {"type": "end", "sid": ask["sid"]}))

    async def handler(ws: ServerConnection) -> None:
        tasks = set()
        async for message in ws:
            task = asyncio.create_task(turn(ws, orjson.loads(message)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    return handler


def replay_handler(db_url: str) -> Any:
    if db_url.startswith("sqlite"):  # the smoke run under the tests may be on SQLite
        import sqlite3

        conn: Any = sqlite3.connect(db_url.split("///", 1)[1], check_same_thread=False)
        mark, load = "?", orjson.loads
    else:
        import psycopg

        conn = psycopg.connect(db_url, autocommit=True)
        mark, load = "%s", lambda data: data
    query = (f'SELECT "offset", data FROM gateway_topicevent WHERE user_id = {mark} AND '  # noqa: S608
             f'epoch = {mark} AND "offset" > {mark} ORDER BY "offset" LIMIT {mark}')

    async def handler(ws: ServerConnection) -> None:
        async for message in ws:
            ask = orjson.loads(message)
            rows = conn.execute(query, (ask["user"], ask["epoch"], ask["after"], ask["limit"]))
            pubs = [{"data": load(data), "offset": offset} for offset, data in rows.fetchall()]
            await ws.send(orjson.dumps({"id": ask["id"], "history": {
                "epoch": ask["epoch"], "offset": ask["head"], "publications": pubs}}).decode())

    return handler


async def serve_forever(kind: str, port: int, llm: str, db: str, redis: str,
                        ping: float) -> None:
    floor = Floor(db) if kind == "floor" else None
    if floor is not None:
        await floor.open()
    handler = {"echo": lambda: echo, "relay": lambda: relay_handler(llm, redis),
               "floor": lambda: relay_handler(llm, redis, floor),
               "replay": lambda: replay_handler(db)}[kind]()
    async with serve(handler, "127.0.0.1", port, compression=None, max_size=None,
                     ping_interval=ping or None, ping_timeout=ping or None, backlog=4096):
        await asyncio.get_running_loop().create_future()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bare")
    parser.add_argument("kind", choices=["echo", "relay", "floor", "replay"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--llm", default="")
    parser.add_argument("--db", default="")
    parser.add_argument("--redis", default="")
    parser.add_argument("--ping", type=float, default=0.0)
    args = parser.parse_args()
    asyncio.run(serve_forever(args.kind, args.port, args.llm, args.db, args.redis,
                              args.ping))


if __name__ == "__main__":
    main()
