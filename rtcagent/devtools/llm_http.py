"""The HTTP side of the scripted LLM: routes, the Chat Completions answer and request records.

Invariants:

* Every request under ``/v1/`` is recorded before it is answered, and its ``outcome`` is final
  (``done`` set) once the answer has ended; ``/__scripted__/`` control requests are not recorded.
* A request the real API would refuse (no ``model``, empty ``messages``, unknown path) consumes
  no reply.
* Streams use HTTP/1.1 chunked encoding; a scripted disconnect shuts the socket down mid-body.
* Scripted waits (``chunk_delay``, ``hang``) wait on the owner's ``stopping`` event, so ``stop()``
  ends them at once. A ``chunk_delay`` wait also watches the socket: a client that closes its end
  mid-stream (a cancelled answer) ends the stream at once as ``client_closed``, so ``ended_at``
  is the moment the close arrived, not the next write.
* ``received_at`` and ``ended_at`` are ``time.monotonic()`` values: on Linux one clock for every
  process of the machine, so they compare with stamps taken by a client in another process.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rtcagent.devtools import llm_wire

if TYPE_CHECKING:
    from rtcagent.devtools.scripted_llm import ScriptedLLM

_CONTROL = "/__scripted__/"
_STOP_POLL = 0.05  # seconds: how often a wait that watches the socket also checks ``stopping``


@dataclass
class RecordedRequest:
    """One request the server received, as the client sent it.

    ``received_at``: when its body had been read; ``ended_at``: when its answer ended (for
    ``client_closed``, when the client's close arrived), None while pending.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float = field(default_factory=time.monotonic)
    outcome: str = "pending"
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    ended_at: float | None = None
    peer: tuple[str, int] | None = None  # the client's address: one per connection

    def finish(self, outcome: str) -> None:
        self.ended_at = time.monotonic()
        self.outcome = outcome
        self.done.set()

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "body": self.body,
            "outcome": self.outcome,
            "received_at": self.received_at,
            "ended_at": self.ended_at,
        }


class ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's listen backlog is 5: dozens of clients opening connections at once (the
    # bench's sustained case) overflowed it, and a connection that lost that race was reset.
    request_queue_size = 128
    owner: ScriptedLLM

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client (or stop()) closing a kept-alive connection is normal here, not an error.
        if isinstance(sys.exc_info()[1], ConnectionError | OSError):
            return
        super().handle_error(request, client_address)


class ScriptedHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small SSE frames must not wait for delayed ACKs (~40 ms)
    server: ScriptedServer

    # -- plumbing ---------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.owner.verbose:
            super().log_message(format, *args)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", "req_" + uuid.uuid4().hex[:16])
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(
        self,
        status: int,
        message: str,
        *,
        type_: str,
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        self._send_json(
            status,
            llm_wire.error_body({"message": message, "type": type_, "code": code, "param": param}),
        )

    def _drop(self) -> None:
        """Close the socket without (finishing) an answer."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _pause(self, seconds: float) -> str | None:
        """Wait ``seconds`` before the next chunk: ``"stopping"`` once ``stop()`` is called,
        ``"client_closed"`` as soon as the client closes its end (EOF or reset on the socket),
        else None when the time is up."""
        owner = self.server.owner
        deadline = time.monotonic() + seconds
        poller: select.poll | None = select.poll()  # not select(): any fd number works
        try:
            poller.register(self.connection, select.POLLIN)
        except (OSError, ValueError):
            poller = None
        while True:
            if owner.stopping.is_set():
                return "stopping"
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if poller is None:
                owner.stopping.wait(left)
                continue
            try:
                ready = poller.poll(min(left, _STOP_POLL) * 1000)
                # Mid-answer an HTTP/1.1 client sends nothing: readable means closed, unless
                # it pipelined its next request, which is left for after the answer.
                if ready and not self.connection.recv(1, socket.MSG_PEEK):
                    return "stopping" if owner.stopping.is_set() else "client_closed"
            except (OSError, ValueError):  # reset, or the socket is already closed
                return "stopping" if owner.stopping.is_set() else "client_closed"
            if ready:
                poller = None

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _record(self, body: Any) -> RecordedRequest:
        record = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            peer=tuple(self.client_address[:2]),
        )
        self.server.owner._add_record(record)
        return record

    def _authorized(self) -> bool:
        key = self.server.owner.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._send_error(
            401,
            "Incorrect API key provided.",
            type_="invalid_request_error",
            code="invalid_api_key",
        )
        return False

    # -- routes -----------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == _CONTROL + "requests":
            self._send_json(200, [r.as_dict() for r in self.server.owner.requests])
            return
        record = self._record(None)
        if path == "/v1/models":
            if self._authorized():
                self._send_json(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {"id": m, "object": "model", "created": 0, "owned_by": "scripted"}
                            for m in self.server.owner.models
                        ],
                    },
                )
            record.finish("completed")
            return
        self._send_error(404, f"Unknown path {path}", type_="invalid_request_error")
        record.finish("invalid")

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        raw = self._read_body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
            parsed = False
        else:
            parsed = True
        if path.startswith(_CONTROL):
            self._control(path[len(_CONTROL) :], body)
            return
        record = self._record(body if parsed else raw.decode("utf-8", "replace"))
        outcome = "invalid"
        try:
            if path != "/v1/chat/completions":
                self._send_error(404, f"Unknown path {path}", type_="invalid_request_error")
            elif not self._authorized():
                outcome = "error"
            elif not parsed or not isinstance(body, dict):
                self._send_error(
                    400,
                    "We could not parse the JSON body of your request.",
                    type_="invalid_request_error",
                )
            elif not isinstance(body.get("model"), str):
                self._send_error(
                    400,
                    "you must provide a model parameter",
                    type_="invalid_request_error",
                    param="model",
                )
            elif not isinstance(body.get("messages"), list) or not body["messages"]:
                self._send_error(
                    400,
                    "'messages' must be a non-empty array",
                    type_="invalid_request_error",
                    param="messages",
                )
            else:
                outcome = self._chat(body)
        finally:
            record.finish(outcome)

    def _control(self, action: str, body: Any) -> None:
        owner = self.server.owner
        try:
            if action == "replies":
                for reply in body if isinstance(body, list) else [body]:
                    owner.enqueue(reply)
            elif action == "rules":
                owner.add_rule(body["when"], body["reply"], times=body.get("times"))
            elif action == "reset":
                owner.reset()
            else:
                self._send_error(
                    404, f"Unknown control action {action}", type_="invalid_request_error"
                )
                return
        except (ValueError, KeyError, TypeError) as exc:
            self._send_error(400, str(exc), type_="invalid_request_error")
            return
        self._send_json(200, {"ok": True, "pending": owner.script.pending()})

    # -- chat completions -------------------------------------------------------------------

    def _chat(self, body: dict[str, Any]) -> str:
        owner = self.server.owner
        reply = owner.script.pick(body)
        if "hang" in reply:
            owner.stopping.wait(reply["hang"])
            self._drop()
            return "hung"
        if "error" in reply:
            error = reply["error"]
            headers = {}
            if error.get("retry_after") is not None:
                headers["retry-after"] = str(error["retry_after"])
            self._send_json(error["status"], llm_wire.error_body(error), headers)
            return "error"
        if not body.get("stream"):
            if "disconnect_after" in reply:
                self._drop()
                return "disconnected"
            if reply.get("malformed"):
                self._send_raw_json(b'{"id": "chatcmpl-broken", "choices": [')
                return "completed"
            self._send_json(200, llm_wire.completion(reply, body))
            return "completed"
        return self._stream(reply, body)

    def _send_raw_json(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _stream(self, reply: dict[str, Any], body: dict[str, Any]) -> str:
        owner = self.server.owner
        delay = float(reply.get("chunk_delay", owner.chunk_delay))
        size = int(reply.get("chunk_size", owner.chunk_size))
        cut_after = reply.get("disconnect_after")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", "req_" + uuid.uuid4().hex[:16])
        self.end_headers()
        try:
            for sent, chunk in enumerate(llm_wire.stream_chunks(reply, body, chunk_size=size)):
                if cut_after is not None and sent >= cut_after:
                    self._drop()
                    return "disconnected"
                if delay:
                    ended = self._pause(delay)
                    if ended == "stopping":
                        self._drop()
                        return "disconnected"
                    if ended == "client_closed":
                        self.close_connection = True
                        return "client_closed"
                if reply.get("malformed") and sent == 2:
                    self._write_chunk(b'data: {"id": "chatcmpl-broken", "choices": [{"delta": \n\n')
                    break
                self._write_chunk(llm_wire.sse(chunk))
            else:
                self._write_chunk(llm_wire.sse("[DONE]"))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return "client_closed"
        return "completed"
