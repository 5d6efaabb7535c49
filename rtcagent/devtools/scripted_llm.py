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
  ``received_at`` and ``ended_at`` (``time.monotonic()``) say when it arrived and when its answer
  ended; a client closing a stream during a ``chunk_delay`` is seen at once, not at the next write.
* Streams use HTTP/1.1 chunked encoding, so a scripted disconnect is seen by the client as a
  truncated body, exactly like a dropped upstream connection.
* ``stop()`` wakes every scripted delay or hang and shuts down open connections.
* Test-control endpoints live under ``/__scripted__/`` (enqueue, rules, requests, reset) for a
  server running in another process; they are not recorded.

CLI: ``python -m rtcagent.devtools.scripted_llm --port 8765 --script script.json``.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from rtcagent.devtools.llm_http import RecordedRequest, ScriptedHandler, ScriptedServer
from rtcagent.devtools.llm_script import Script, read_script_file

__all__ = ["RecordedRequest", "ScriptedLLM", "main"]


class ScriptedLLM:
    """The scripted server, started in a background thread (use it as a context manager)."""

    def __init__(
        self,
        script: dict[str, Any] | list[Any] | str | Path | None = None,
        chunk_delay: float | None = None,
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
            if chunk_delay is None:
                chunk_delay = float(script.get("chunk_delay", 0.0))
            if "model" in script:
                models = (script["model"],)
        if script is not None:
            self.script.load(script)
        self.chunk_delay = chunk_delay or 0.0  # seconds before each chunk; replies may override
        self.chunk_size = chunk_size
        self.api_key = api_key
        self.models = list(models)
        self.verbose = verbose
        self.stopping = threading.Event()
        self._host, self._port = host, port
        self._lock = threading.Lock()
        self._records: list[RecordedRequest] = []
        self._sockets: set[socket.socket] = set()
        self._server: ScriptedServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def bind(self) -> None:
        """Open the listening socket (the port is known from here on)."""
        if self._server is None:
            self.stopping.clear()
            self._server = ScriptedServer((self._host, self._port), ScriptedHandler)
            self._server.owner = self

    def start(self) -> ScriptedLLM:
        """Bind and serve in a daemon thread."""
        self.bind()
        assert self._server is not None
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="scripted-llm",
            daemon=True,
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
    parser.add_argument("--chunk-delay", type=float, default=None, help="seconds before each chunk")
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
