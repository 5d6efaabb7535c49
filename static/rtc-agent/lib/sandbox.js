// The `script` engine. Model-written code runs in a Worker started inside an iframe with
// sandbox="allow-scripts" (no allow-same-origin: an opaque origin, no cookies, no storage, no
// access to the host page) under a CSP with connect-src 'none' (no network). The worker keeps a
// `while (true) {}` off every page thread; after the time limit the iframe (and so the worker)
// is destroyed. The frame's only window message is `ready`; then the script's messages travel on
// a MessageChannel whose second port only the frame holds, so nothing the code posts reaches the
// host page's own listeners. Inside, the code
// sees `params`, a capturing `console`, and `rtcAgent` (fs calls, callFunction, and the page's
// grouped functions as `rtcAgent.group.fn(args)`) whose calls are relayed to the host and
// answered by `handleCall`.
// The frame loads ../sandbox.html from the widget's server, which carries that CSP itself: a
// srcdoc frame would inherit the host page's CSP, and a strict one (no 'unsafe-eval', as on
// rtcagent's own pages) would stop the code.
const SANDBOX_URL = new URL('../sandbox.html', import.meta.url).href;

// Runs in the worker (serialised with toString: it must not close over anything).
function workerMain() {
  const logs = [], warnings = [], errors = [];
  const fmt = (args) => args.map((a) => (typeof a === 'string' ? a : (() => { try { return JSON.stringify(a); } catch { return String(a); } })())).join(' ');
  const keep = (list) => (...args) => { if (list.length < 100) list.push(fmt(args)); };
  const console = { log: keep(logs), info: keep(logs), debug: keep(logs), warn: keep(warnings), error: keep(errors) };
  self.console = console;
  let seq = 0;
  const waiting = new Map();
  const call = (op, args) => new Promise((resolve, reject) => {
    const id = ++seq;
    waiting.set(id, { resolve, reject });
    postMessage({ t: 'call', id, op, args });
  });
  const base = {
    fs: {
      read: (path) => call('fs.read', { path }),
      write: (path, content) => call('fs.write', { path, content }),
      list: (path = '/') => call('fs.list', { path }),
      edit: (path, old_string, new_string, replace_all = false) => call('fs.edit', { path, old_string, new_string, replace_all }),
      grep: (pattern, path = '/', caseSensitive = true) => call('fs.grep', { pattern, path, caseSensitive }),
      find: (pattern, path = '/') => call('fs.find', { pattern, path }),
    },
    callFunction: (name, args = {}) => call('callFunction', { name, args }),
  };
  base.readFile = base.fs.read;
  base.writeFile = base.fs.write;
  base.listDir = base.fs.list;
  // The page's grouped functions as `rtcAgent.<group>.<function>(args)`: any other name is a
  // group whose members call `<group>.<member>` (the host answers "no such function" if none).
  const group = (name) => new Proxy({}, {
    get: (_, fn) => (typeof fn === 'string' && fn !== 'then' ? (args = {}) => call('callFunction', { name: `${name}.${fn}`, args }) : undefined),
  });
  const rtcAgent = new Proxy(base, {
    get: (target, key) => (key in target || typeof key !== 'string' || key === 'then' ? target[key] : group(key)),
  });
  self.onmessage = async (e) => {
    const m = e.data;
    if (m.t === 'reply') {
      const w = waiting.get(m.id);
      waiting.delete(m.id);
      if (w) (m.error ? w.reject(new Error(m.error)) : w.resolve(m.value));
      return;
    }
    if (m.t !== 'run') return;
    const started = performance.now();
    const finish = (extra) => {
      let out = { ...extra, logs, warnings, errors, duration_ms: Math.round(performance.now() - started) };
      try { out = JSON.parse(JSON.stringify(out)); } catch { out.result = String(out.result); }
      postMessage({ t: 'done', out });
    };
    try {
      const AsyncFunction = (async () => {}).constructor;
      const fn = new AsyncFunction('rtcAgent', 'params', 'console', '"use strict";\n' + m.code);
      const result = await fn(rtcAgent, m.params || {}, console);
      finish({ result: result === undefined ? null : result });
    } catch (err) {
      errors.push(String((err && err.message) || err));
      finish({ result: null, error: String((err && err.message) || err) });
    }
  };
}

// The frame (sandbox.html) starts the worker from this source, sent with the `run` message.
const workerSource = () => `(${workerMain.toString()})();`;

export const SCRIPT_TIMEOUT_MS = 30000;

export function runScript({ code, params, handleCall, timeoutMs = SCRIPT_TIMEOUT_MS, container = document.body }) {
  return new Promise((resolve) => {
    const frame = document.createElement('iframe');
    frame.setAttribute('sandbox', 'allow-scripts');
    frame.setAttribute('aria-hidden', 'true');
    frame.style.display = 'none';
    frame.src = SANDBOX_URL;
    const started = performance.now();
    let settled = false;
    const channel = new MessageChannel();
    const end = (out) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      removeEventListener('message', onMessage);
      channel.port1.close();
      frame.remove();
      resolve(out);
    };
    const timer = setTimeout(() => end({
      result: null, error: `script stopped: time limit of ${Math.round(timeoutMs / 1000)} s exceeded`,
      logs: [], warnings: [], errors: ['timeout'], duration_ms: Math.round(performance.now() - started),
    }), timeoutMs);
    // The frame's one message on the window is `ready` (fixed, not the model's); from then on
    // the script's traffic uses a MessageChannel whose other port only the frame holds.
    const onMessage = (e) => {
      if (e.source !== frame.contentWindow || !e.data || e.data.t !== 'ready') return;
      removeEventListener('message', onMessage);
      frame.contentWindow.postMessage(
        { t: 'run', code: String(code || ''), params: params || {}, worker: workerSource() }, '*', [channel.port2]);
    };
    channel.port1.onmessage = async (e) => {
      const m = e.data || {};
      if (m.t === 'done') end(m.out);
      else if (m.t === 'call') {
        let reply;
        try { reply = { t: 'reply', id: m.id, value: await handleCall(m.op, m.args || {}) }; } catch (err) { reply = { t: 'reply', id: m.id, error: String(err.message || err) }; }
        if (settled) return;
        // A value that cannot be cloned (a DOM node, a function) must fail this call, not leave
        // the script waiting for the time limit.
        try { channel.port1.postMessage(reply); } catch (err) { channel.port1.postMessage({ t: 'reply', id: m.id, error: String(err.message || err) }); }
      }
    };
    addEventListener('message', onMessage);
    container.appendChild(frame);
  });
}
