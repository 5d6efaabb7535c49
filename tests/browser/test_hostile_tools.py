"""Issue 7, hostile input (browser side): tool calls an attacker (or a confused model) writes.

The widget's real tool functions are driven in the page (``agent.runTool``, what the executor
calls for an RTC), after a cookie, a ``localStorage`` and a ``sessionStorage`` key were set:

* the virtual file system refuses every path that could climb out of its root or that no file
  should have (``..`` in any spelling, NUL and other control characters, very long paths) for
  ``read``, ``write``, ``ls`` (and the other file tools), also when asked from a script;
* the ``script`` sandbox reaches no network (``RecordingServer`` records every request it gets,
  and gets none), none of the page's storage or cookies, and no other window.

Each attempt must fail with a clear error and leave the page's cookies, storage, IndexedDB
databases and VFS exactly as they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import login
from tests.reliability.test_hostile_tokens import RecordingServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CTX = "{sessionId: 'hostile'}"

SNAPSHOT = """async () => {
  const dump = (s) => Object.fromEntries(
    Array.from({ length: s.length }, (_, i) => [s.key(i), s.getItem(s.key(i))]));
  const agent = document.querySelector('rtc-agent').agent;
  return {
    cookie: document.cookie,
    local: dump(localStorage),
    session: dump(sessionStorage),
    databases: (await indexedDB.databases()).map((d) => d.name).sort(),
    // /functions/ holds the widget's own docs of the page's functions, rewritten whenever a
    // function is registered: not something a tool call changed.
    files: (await agent.vfs.list()).filter((f) => !f.path.startsWith('/functions/'))
      .map((f) => [f.path, f.content]).sort(),
  };
}"""

# Paths that must be refused, each with the start of the error the model is told.
DOTDOT = 'path may not contain ".."'
CONTROL = "path may not contain control characters"
TOO_LONG = "path is longer than 4096 characters"
NOT_STRING = "path must be a string"
HOSTILE_PATHS = [
    ("../etc/passwd", DOTDOT),
    ("/../../etc/passwd", DOTDOT),
    ("notes/../../../etc/passwd", DOTDOT),
    ("/notes/..", DOTDOT),
    ("%2e%2e/etc/passwd", DOTDOT),
    ("/%2E%2e/%2e%2E/etc/passwd", DOTDOT),
    ("/notes/%2e%2e%2f%2e%2e%2fetc%2fpasswd", DOTDOT),
    ("%252e%252e/etc/passwd", DOTDOT),
    ("..%5c..%5cetc%5cpasswd", DOTDOT),
    ("\uff0e\uff0e/etc/passwd", DOTDOT),
    ("..\\..\\etc\\passwd", DOTDOT),
    ("\\..\\..\\windows\\win.ini", DOTDOT),
    ("notes\\..\\..\\x", DOTDOT),
    ("/etc/passwd\u0000.md", CONTROL),
    ("\u0000", CONTROL),
    ("/notes/a\u0000/../../b", CONTROL),
    ("/notes/a\nb.md", CONTROL),
    ("/" + "a" * 5000, TOO_LONG),
    ("/a" * 3000, TOO_LONG),
    ("/." * 3000 + "/x", TOO_LONG),
    (42, NOT_STRING),
    (["/a"], NOT_STRING),
    ({"toString": "/a"}, NOT_STRING),
]
# Names that only look odd: still ordinary files.
HARMLESS_PATHS = ["/a..b.md", "/...", "/.hidden", "/notes/%41.md", "/notes/x..", "/-"]


@pytest.fixture(scope="module")
def recorder() -> Iterator[RecordingServer]:
    with RecordingServer() as server:
        yield server


@pytest.fixture
def agent_page(page: Any, web: Any, web_user: Any, recorder: RecordingServer) -> Iterator[Any]:
    """The demo page, logged in, with the widget started and a canary in each storage."""
    login(page, web_user)
    page.evaluate("""() => {
        document.cookie = 'canary=c1; path=/';
        localStorage.setItem('canary', 'l1');
        sessionStorage.setItem('canary', 's1');
    }""")
    page.baseline = page.evaluate(SNAPSHOT)
    assert page.baseline["cookie"] == "canary=c1"
    recorder.requests.clear()
    yield page


def _assert_page_unchanged(page: Any) -> None:
    assert page.evaluate(SNAPSHOT) == page.baseline
    assert page.errors == []


def _run_tools(page: Any, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each ``(tool, params)`` run through ``agent.runTool``: ``{ok, value}`` or ``{ok, error}``."""
    return page.evaluate(
        """async ([calls, ctx]) => {
            const agent = document.querySelector('rtc-agent').agent;
            const out = [];
            for (const [name, params] of calls) {
              try { out.push({ ok: true, value: await agent.runTool(name, params, ctx) }); }
              catch (err) { out.push({ ok: false, error: String(err.message || err) }); }
            }
            return out;
        }""",
        [calls, {"sessionId": "hostile"}],
    )


def _script(page: Any, code: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``script`` tool's answer for ``code`` (``{result, logs, ..., error?}``)."""
    return page.evaluate(
        """async ([code, params, ctx]) => document.querySelector('rtc-agent').agent
            .runTool('script', { action: 'eval', code, params }, ctx)""",
        [code, params or {}, {"sessionId": "hostile"}],
    )


# --- the virtual file system -----------------------------------------------------------------


def test_file_tools_refuse_hostile_paths(agent_page: Any) -> None:
    calls = []
    for path, _ in HOSTILE_PATHS:
        calls += [
            ("read", {"path": path}),
            ("write", {"path": path, "content": "pwned"}),
            ("ls", {"path": path}),
            ("edit", {"path": path, "old_string": "a", "new_string": "b"}),
            ("grep", {"pattern": ".", "path": path}),
            ("find", {"pattern": "*", "path": path}),
        ]
    results = _run_tools(agent_page, calls)
    expected = [reason for _, reason in HOSTILE_PATHS for _ in range(6)]
    for (tool, params), result, reason in zip(calls, results, expected, strict=True):
        assert result["ok"] is False, (tool, params, result)
        assert result["error"].startswith(reason), (tool, params, result)
        assert len(result["error"]) < 200, "the error does not echo a huge path back"
    _assert_page_unchanged(agent_page)


def test_scripts_get_the_same_refusals_from_the_vfs(agent_page: Any) -> None:
    code = """
      const out = [];
      for (const path of params.paths) {
        for (const op of ['read', 'write', 'list']) {
          try { await rtcAgent.fs[op](path, 'pwned'); out.push(op + ': reached'); }
          catch (err) { out.push(op + ': ' + err.message); }
        }
      }
      return out;
    """
    paths = ["../etc/passwd", "%2e%2e/x", "a\\..\\..\\b", "/x\u0000", "/" + "a" * 5000]
    reasons = [DOTDOT, DOTDOT, DOTDOT, CONTROL, TOO_LONG]
    out = _script(agent_page, code, {"paths": paths})
    assert out.get("error") is None, out
    got = out["result"]
    assert [line.split(": ", 1)[0] for line in got] == ["read", "write", "list"] * len(paths)
    for line, reason in zip(got, [r for r in reasons for _ in range(3)], strict=True):
        assert line.split(": ", 1)[1].startswith(reason), line
    _assert_page_unchanged(agent_page)


def test_harmless_odd_names_are_still_ordinary_files(agent_page: Any) -> None:
    calls = [("write", {"path": p, "content": "ok"}) for p in HARMLESS_PATHS]
    calls += [("read", {"path": p}) for p in HARMLESS_PATHS]
    results = _run_tools(agent_page, calls)
    assert [r["value"] for r in results] == (
        [f"wrote 2 bytes to {p}" for p in HARMLESS_PATHS] + ["1\tok"] * len(HARMLESS_PATHS))


# --- the script sandbox ----------------------------------------------------------------------

# Every way out of the sandbox a script might try: (name, expression, the start of the error it
# must meet). An expression may return a promise; ``settle(target, ok, fail)`` waits for one of
# two events (WebSocket, EventSource and XHR report a refused connection as an event).
ESCAPES = [
    ("fetch", "fetch(url + '/fetch')", "TypeError: Failed to fetch"),
    ("fetch_no_cors", "fetch(url + '/no-cors', { mode: 'no-cors' })", "TypeError: Failed to fetch"),
    ("xhr", "(() => { const x = new XMLHttpRequest(); x.open('GET', url + '/xhr');"
            " const p = settle(x, 'onload', 'onerror'); x.send(); return p; })()",
     "Error: connection failed"),
    ("websocket", "settle(new WebSocket(url.replace('http', 'ws') + '/ws'), 'onopen', 'onerror')",
     "Error: connection failed"),
    ("eventsource", "settle(new EventSource(url + '/sse'), 'onopen', 'onerror')",
     "Error: connection failed"),
    ("import", "import(url + '/module.js')",
     "TypeError: Failed to fetch dynamically imported module"),
    ("importScripts", "importScripts(url + '/classic.js')",
     "NetworkError: Failed to execute 'importScripts'"),
    ("sendBeacon", "navigator.sendBeacon(url + '/beacon', 'x')",
     "TypeError: navigator.sendBeacon is not a function"),
    ("worker", "new Worker(url + '/worker.js')", "SecurityError: Failed to construct 'Worker'"),
    ("cookie", "document.cookie", "ReferenceError: document is not defined"),
    ("localStorage", "localStorage.getItem('canary')",
     "ReferenceError: localStorage is not defined"),
    ("sessionStorage", "sessionStorage.getItem('canary')",
     "ReferenceError: sessionStorage is not defined"),
    ("indexedDB", "indexedDB.open('pwned', 1)",
     "SecurityError: Failed to execute 'open' on 'IDBFactory'"),
    ("caches", "caches.open('pwned')", "ReferenceError: caches is not defined"),
    ("parent", "parent.document.cookie", "ReferenceError: parent is not defined"),
    ("top", "top.document.cookie", "ReferenceError: top is not defined"),
    ("opener", "opener.document.cookie", "ReferenceError: opener is not defined"),
    ("window", "window.document.cookie", "ReferenceError: window is not defined"),
    ("self_document", "self.document.cookie", "TypeError: Cannot read properties of undefined"),
]
ESCAPE_HARNESS = """
  const url = params.url, out = {};
  const AsyncFunction = (async () => {}).constructor;
  const settle = (target, ok, fail) => new Promise((resolve, reject) => {
    target[ok] = () => resolve('open');
    target[fail] = () => {
      if (target.close) target.close();
      reject(new Error('connection failed'));
    };
    setTimeout(() => reject(new Error('no answer')), 3000);
  });
  for (const [name, body] of params.attempts) {
    try {
      const run = new AsyncFunction('url', 'settle', 'return await (' + body + ');');
      const r = await run(url, settle);
      out[name] = 'reached: ' + String(r).slice(0, 80);
    } catch (err) {
      out[name] = (err && err.name ? err.name + ': ' : '') + String((err && err.message) || err);
    }
  }
  return out;
"""


def test_scripts_reach_no_network_no_storage_and_no_window(
    agent_page: Any, recorder: RecordingServer
) -> None:
    attempts = [[name, body] for name, body, _ in ESCAPES]
    out = _script(agent_page, ESCAPE_HARNESS, {"url": recorder.url, "attempts": attempts})
    assert out.get("error") is None, out
    assert list(out["result"]) == [name for name, _, _ in ESCAPES]
    for name, _, blocked in ESCAPES:
        assert out["result"][name].startswith(blocked), (name, out["result"][name])
    assert recorder.requests == []
    _assert_page_unchanged(agent_page)


def test_script_messages_reach_no_other_channel(agent_page: Any) -> None:
    """A script's ``postMessage`` and ``BroadcastChannel`` reach no listener of the page but
    the sandbox's own."""
    agent_page.evaluate("""() => {
        window.__seen = [];
        addEventListener('message', (e) => window.__seen.push(e.data));
        const bc = new BroadcastChannel('rtc-hostile');
        bc.onmessage = (e) => window.__seen.push({ broadcast: e.data });
    }""")
    out = _script(agent_page, """
        new BroadcastChannel('rtc-hostile').postMessage('pwned');
        postMessage({ t: 'hostile', to: 'page listeners' });
        return 'sent';
    """)
    assert out["result"] == "sent"
    seen = agent_page.evaluate("window.__seen")
    assert {"broadcast": "pwned"} not in seen
    assert [m for m in seen if isinstance(m, dict) and m.get("t") == "hostile"] == []
    _assert_page_unchanged(agent_page)




def test_a_reply_the_sandbox_cannot_carry_fails_the_call_at_once(agent_page: Any) -> None:
    """A host function answering something that cannot cross into the worker (a DOM node, a
    function) fails the script's call with a clear error, instead of leaving it waiting for
    the time limit while the page logs an unhandled DataCloneError."""
    agent_page.evaluate("""() => rtcAgent.registerFunction({ name: 'pageBody', class: 'read',
        description: 'the page body', handler: () => document.body })""")
    out = agent_page.evaluate(
        """async ([ctx]) => {
            const agent = document.querySelector('rtc-agent').agent;
            const run = agent.runTool('script', { action: 'eval', code: `
              try { await rtcAgent.callFunction('pageBody'); return 'reached'; }
              catch (err) { return err.message; }` }, ctx);
            const hung = new Promise((resolve) => setTimeout(() => resolve({ hung: true }), 5000));
            return Promise.race([run, hung]);
        }""",
        [{"sessionId": "hostile"}],
    )
    assert out.get("hung") is None, "the call was never answered"
    assert out["result"].startswith("Failed to execute 'postMessage'"), out
    assert "could not be cloned" in out["result"]
    _assert_page_unchanged(agent_page)


def test_a_forged_call_for_an_inherited_name_is_an_unknown_call(agent_page: Any) -> None:
    """A script posting its own ``call`` for ``constructor`` or ``valueOf`` (names every object
    inherits) is told the call is unknown; nothing on the page runs."""
    out = _script(agent_page, """
        const ask = (op) => new Promise((resolve) => {
            const previous = self.onmessage;
            self.onmessage = (e) => {
                if (e.data && e.data.id === 4242) { self.onmessage = previous; resolve(e.data); }
                else previous(e);
            };
            postMessage({ t: 'call', id: 4242, op, args: {} });
        });
        return [(await ask('constructor')).error, (await ask('valueOf')).error];
    """)
    assert out["result"] == ["unknown call: constructor", "unknown call: valueOf"]
    _assert_page_unchanged(agent_page)
