"""A scripted OpenAI-compatible HTTP server for tests, benchmarks and demos.

It is a real server (``ThreadingHTTPServer`` on 127.0.0.1) speaking ``POST /v1/chat/completions``
(JSON, or server-sent events with ``"stream": true``) and ``GET /v1/models`` the way the official
API does, so the real ``openai`` client talks to it unchanged. What it answers comes from a script
(see ``rtcagent.devtools.llm_script`` and ``docs/scripted-llm.md``).

Invariants:

* Each chat request consumes at most one reply; when the script is exhausted a clear default
  answers (``"(scripted LLM: no reply left)"``), never a hang.
* Every request under ``/v1/`` is recorded (method, path, lower-cased headers including
  ``authorization``, parsed JSON body) before it is answered; its ``outcome`` is set when the
  answer ends: ``completed``, ``error``, ``hung``, ``disconnected`` (the script closed the socket),
  ``client_closed`` (the client went away mid-stream) or ``invalid``; ``done`` is then set.
* Streams use HTTP/1.1 chunked encoding, so a scripted disconnect is seen by the client as a
  truncated body, exactly like a dropped upstream connection.
* ``stop()`` wakes every scripted delay or hang and shuts down open connections.
* Test-control endpoints live under ``/__scripted__/`` (enqueue, rules, requests, reset) for a
  server running in another process; they are not recorded.

CLI: ``python -m rtcagent.devtools.scripted_llm --port 8765 --script script.json``.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any
from urllib.parse import urlsplit

from rtcagent.devtools import llm_wire
from rtcagent.devtools.llm_script import Script, read_script_file

_CONTROL = "/__scripted__/"


@dataclass
class RecordedRequest:
    """One request the server received, as the client sent it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float = field(default_factory=time.monotonic)
    outcome: str = "pending"
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    def finish(self, outcome: str) -> None:
        self.outcome = outcome
        self.done.set()

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "body": self.body,
            "outcome": self.outcome,
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedLLM

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client (or stop()) closing a kept-alive connection is normal here, not an error.
        if isinstance(sys.exc_info()[1], ConnectionError | OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

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

    def _send_json(
        self, status: int, payload: Any, headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", "req_" + uuid.uuid4().hex[:16])
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: int, message: str, *, type_: str, code: str | None = None,
                    param: str | None = None) -> None:
        self._send_json(status, llm_wire.error_body(
            {"message": message, "type": type_, "code": code, "param": param}
        ))

    def _drop(self) -> None:
        """Close the socket without (finishing) an answer."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _record(self, body: Any) -> RecordedRequest:
        record = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        self.server.owner._add_record(record)
        return record

    def _authorized(self) -> bool:
        key = self.server.owner.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._send_error(401, "Incorrect API key provided.", type_="invalid_request_error",
                         code="invalid_api_key")
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
                self._send_json(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "scripted"}
                    for m in self.server.owner.models
                ]})
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
            self._control(path[len(_CONTROL):], body)
            return
        record = self._record(body if parsed else raw.decode("utf-8", "replace"))
        outcome = "invalid"
        try:
            if path != "/v1/chat/completions":
                self._send_error(404, f"Unknown path {path}", type_="invalid_request_error")
            elif not self._authorized():
                outcome = "error"
            elif not parsed or not isinstance(body, dict):
                self._send_error(400, "We could not parse the JSON body of your request.",
                                 type_="invalid_request_error")
            elif not isinstance(body.get("model"), str):
                self._send_error(400, "you must provide a model parameter",
                                 type_="invalid_request_error", param="model")
            elif not isinstance(body.get("messages"), list) or not body["messages"]:
                self._send_error(400, "'messages' must be a non-empty array",
                                 type_="invalid_request_error", param="messages")
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
                self._send_error(404, f"Unknown control action {action}",
                                 type_="invalid_request_error")
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
                if delay and owner.stopping.wait(delay):
                    self._drop()
                    return "disconnected"
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


class ScriptedLLM:
    """The scripted server, started in a background thread (use it as a context manager)."""

    def __init__(
        self,
        script: dict[str, Any] | list[Any] | str | Path | None = None,
        chunk_delay: float = 0.0,
        *,
        chunk_size: int = 4,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        models: Sequence[str] = ("scripted-model",),
        verbose: bool = False,
    ) -> None:
        self.script = Script()
        if isinstance(script, str | Path):
            script = read_script_file(script)
        if isinstance(script, dict):
            chunk_delay = float(script.get("chunk_delay", chunk_delay))
            if "model" in script:
                models = (script["model"],)
        if script is not None:
            self.script.load(script)
        self.chunk_delay = chunk_delay
        self.chunk_size = chunk_size
        self.api_key = api_key
        self.models = list(models)
        self.verbose = verbose
        self.stopping = threading.Event()
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._records: list[RecordedRequest] = []
        self._sockets: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def bind(self) -> None:
        """Open the listening socket (the port is known from here on)."""
        if self._server is None:
            self.stopping.clear()
            self._server = _Server((self._host, self._port), _Handler)
            self._server.owner = self

    def start(self) -> ScriptedLLM:
        """Bind and serve in a daemon thread."""
        self.bind()
        assert self._server is not None
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
            name="scripted-llm", daemon=True,
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Bind and serve in the calling thread until ``stop()`` (used by the CLI)."""
        self.bind()
        assert self._server is not None
        self._server.serve_forever(poll_interval=0.05)

    def stop(self) -> None:
        """Stop serving, wake scripted waits and close open connections."""
        self.stopping.set()
        server, self._server = self._server, None
        if server is None:
            return
        if self._thread is not None:
            server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the scripted LLM is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://host:port/v1``, what an OpenAI client takes as ``base_url``."""
        return f"http://{self._host}:{self.port}/v1"

    # -- script -----------------------------------------------------------------------------

    def enqueue(self, reply: dict[str, Any]) -> None:
        """Queue one reply (validated now; ``ValueError`` on an unknown key)."""
        self.script.enqueue(reply)

    def add_rule(
        self, when: dict[str, Any], reply: dict[str, Any], *, times: int | None = None
    ) -> None:
        """Answer ``reply`` whenever a request matches ``when`` (at most ``times`` times)."""
        self.script.add_rule(when, reply, times=times)

    def reset(self) -> None:
        """Forget queued replies, rules and recorded requests."""
        self.script.clear()
        with self._lock:
            self._records.clear()

    # -- records ----------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the recorded requests, oldest first."""
        with self._lock:
            return list(self._records)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Wait until ``count`` requests were received and answered (or ``TimeoutError``)."""
        deadline = time.monotonic() + timeout
        while True:
            records = self.requests
            if len(records) >= count and all(r.done.is_set() for r in records[:count]):
                return records
            if time.monotonic() >= deadline:
                raise TimeoutError(f"expected {count} finished requests, got {len(records)}")
            time.sleep(0.01)

    def _add_record(self, record: RecordedRequest) -> None:
        with self._lock:
            self._records.append(record)

    def _track(self, sock: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._sockets.add(sock)
            else:
                self._sockets.discard(sock)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the scripted LLM in the foreground until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m rtcagent.devtools.scripted_llm", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--script", type=Path, help="JSON script file (see docs/scripted-llm.md)")
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds before each chunk")
    parser.add_argument("--chunk-size", type=int, default=4, help="characters per text delta")
    parser.add_argument("--api-key", help="require this bearer token (default: accept any)")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)

    llm = ScriptedLLM(
        str(args.script) if args.script else None,
        chunk_delay=args.chunk_delay,
        chunk_size=args.chunk_size,
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        verbose=args.verbose,
    )

    def _terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    llm.bind()
    print(f"scripted LLM listening on {llm.base_url}", flush=True)
    try:
        llm.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        llm.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
