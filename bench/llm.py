"""The project's scripted LLM with pre-encoded chunks and emission stamps, for the harness.

``python -m bench.llm --port P`` serves ``rtcagent.devtools.scripted_llm`` with one handler
change: a chat request whose last user message is a *bench command* gets a generated answer
whose SSE frames are all encoded before the first one is sent (so the model side costs the same
for ours and the baselines), and the server stamps (``time.monotonic_ns``, one clock for every
process of the machine) the moments the harness measures from:

* ``chunks N D``: N text deltas, one every D ms; delta *i* is the unique piece
  ``<serial.i>`` and ``emit[piece]`` is when its frame was written.
* ``chunks N D TAG``: the same with pieces ``<TAG.i>``; ``request[TAG]`` is when the request
  arrived and, if the client closes the stream before its end (a cancel), ``closed[TAG]`` is
  when the close arrived (the waits between chunks watch the socket).
* ``tool``: a ``read`` tool call with id ``call_b<serial>``; ``toolend[id]`` is when the last
  frame of that answer was written.
* a request ending with a tool result for ``call_b<serial>``: ``resume[id]`` is when the
  request arrived; the answer is ``ok``.
* ``live IN OUT``: an ``rt_children`` call (id ``call_l<serial>``) creating a live call on the
  channels IN and OUT; its result is answered ``ok``.

``GET /__bench__/stamps`` returns the stamps gathered so far and forgets them. Any other request
goes to the script as usual.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from typing import Any, NamedTuple

from rtcagent.devtools import llm_wire
from rtcagent.devtools.llm_http import ScriptedHandler, ScriptedServer
from rtcagent.devtools.llm_script import message_text, normalize_reply
from rtcagent.devtools.scripted_llm import ScriptedLLM

_serial = itertools.count(1)
_lock = threading.Lock()
_stamps: dict[str, dict[str, int]] = {
    "emit": {}, "toolend": {}, "resume": {}, "request": {}, "closed": {}}


def _stamp(kind: str, key: str, value: int) -> None:
    with _lock:
        _stamps[kind][key] = value


def piece(serial: int | str, i: int) -> str:
    """The unique text of delta ``i`` of answer ``serial`` (a number, or a command's tag)."""
    head = serial if isinstance(serial, str) else f"{serial:06d}"
    return f"<{head}.{i:04d}>"


class Answer(NamedTuple):
    """A bench command's answer: the reply, its delta size and pace, what to stamp."""

    reply: dict[str, Any]
    size: int = 0
    delay: float = 0.0
    tool_id: str = ""  # stamp ``toolend`` when the answer is written
    tag: str = ""  # stamp ``closed`` if the client closes the stream


def bench_reply(body: dict[str, Any]) -> Answer | None:
    """The answer to a bench command, else None."""
    now = time.monotonic_ns()
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    convo = [m for m in messages if m.get("role") != "system"]
    last = convo[-1] if convo else {}
    if last.get("role") == "tool" and str(last.get("tool_call_id", "")).startswith("call_b"):
        _stamp("resume", last["tool_call_id"], now)
        return Answer(normalize_reply({"content": "ok"}))
    if last.get("role") == "tool" and str(last.get("tool_call_id", "")).startswith("call_l"):
        return Answer(normalize_reply({"content": "ok"}))
    if last.get("role") != "user":
        return None
    words = message_text(last).split()
    serial = next(_serial)
    if words[:1] == ["chunks"] and len(words) in (3, 4):
        count, delay = int(words[1]), float(words[2]) / 1000
        tag = words[3] if len(words) == 4 else ""
        if tag:
            _stamp("request", tag, now)
        head = tag or serial
        text = "".join(piece(head, i) for i in range(count))
        return Answer(normalize_reply({"content": text}), len(piece(head, 0)), delay, "", tag)
    if words[:1] == ["tool"]:
        call_id = f"call_b{serial}"
        reply = {"tool_calls": [{"id": call_id, "name": "read",
                                 "arguments": {"path": "/bench.txt"}}]}
        return Answer(normalize_reply(reply), 8, 0.0, call_id)
    if words[:1] == ["live"] and len(words) == 3:
        reply = {"tool_calls": [{"id": f"call_l{serial}", "name": "rt_children", "arguments": {
            "action": "create", "inputch": words[1], "outputch": words[2]}}]}
        return Answer(normalize_reply(reply), 16)
    return None


class BenchHandler(ScriptedHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/__bench__/stamps"):
            with _lock:
                data = {k: dict(v) for k, v in _stamps.items()}
                for v in _stamps.values():
                    v.clear()
            self._send_json(200, data)
            return
        super().do_GET()

    def _chat(self, body: dict[str, Any]) -> str:
        found = bench_reply(body) if body.get("stream") else None
        if found is None:
            return super()._chat(body)
        reply, size, delay, tool_id, tag = found
        frames = [b"%x\r\n%s\r\n" % (len(d), d) for d in (
            *(llm_wire.sse(c) for c in llm_wire.stream_chunks(reply, body, chunk_size=size)),
            llm_wire.sse("[DONE]"),
        )]
        frames.append(b"0\r\n\r\n")
        pieces = [c["choices"][0]["delta"].get("content") if c["choices"] else None
                  for c in (json.loads(f.split(b"\r\n")[1][6:]) if b"data: {" in f else
                            {"choices": []} for f in frames)]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        try:
            for frame, text in zip(frames, pieces, strict=True):
                if delay and text and self._pause(delay):
                    if tag:
                        _stamp("closed", tag, time.monotonic_ns())
                    self.close_connection = True
                    return "client_closed"
                if text:
                    _stamp("emit", text, time.monotonic_ns())
                self.wfile.write(frame)
            if tool_id:
                _stamp("toolend", tool_id, time.monotonic_ns())
        except (BrokenPipeError, ConnectionResetError):
            if tag:
                _stamp("closed", tag, time.monotonic_ns())
            self.close_connection = True
            return "client_closed"
        return "completed"


class BenchLLM(ScriptedLLM):
    def bind(self) -> None:
        if self._server is None:
            self.stopping.clear()
            self._server = ScriptedServer((self._host, self._port), BenchHandler)
            self._server.owner = self


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.llm")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    llm = BenchLLM(port=args.port)
    llm.serve_forever()


if __name__ == "__main__":
    main()
