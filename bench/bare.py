"""The bare baselines, each the simplest program doing the same unavoidable work as ours.

``python -m bench.bare echo|relay|replay --port P [--llm URL] [--db URL] [--ping S]``

* ``echo``: a ``websockets`` server sending every message back (the RPC and idle baselines).
* ``relay``: WebSocket in, the same HTTP client (``openai``, one per process) to the same scripted
  model, the same publication frames out (the chunk and sustained-turns baselines); a tool call
  checkpoints the conversation to Redis and sends the RTC frame (tool pause), a result reads and
  deletes it and posts to the model (tool resume).
* ``replay``: reads a user's stored publications from PostgreSQL (``psycopg``) and sends the same
  history frames (the replay baseline).

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


def relay_handler(llm_url: str, redis_url: str) -> Any:
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
            async with store.pipeline(transaction=False) as pipe:
                saved, _ = await pipe.get(ask["resume"]).delete(ask["resume"]).execute()
            messages = [*orjson.loads(saved), {"role": "tool", "tool_call_id": ask["resume"],
                                               "content": ask["result"]}]
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
    handler = {"echo": lambda: echo, "relay": lambda: relay_handler(llm, redis),
               "replay": lambda: replay_handler(db)}[kind]()
    async with serve(handler, "127.0.0.1", port, compression=None, max_size=None,
                     ping_interval=ping or None, ping_timeout=ping or None, backlog=4096):
        await asyncio.get_running_loop().create_future()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bare")
    parser.add_argument("kind", choices=["echo", "relay", "replay"])
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
