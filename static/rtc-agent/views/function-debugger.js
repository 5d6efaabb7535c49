// <rtc-function-debugger>: the "Functions" activity (the original's function debugger). The
// page's registered functions by group; pick one to read its description, approval class and
// parameter schema, edit its arguments (JSON, prefilled from the schema's examples and
// defaults) and Run it here: the same validation and hooks as a call by the agent
// (lib/functions.js), then its result, its log (validation errors, progress, what it printed
// with console.* while it ran, `ctx.log(...)`) and a history of the last 20 calls.
// `host` = {functions(), call(fn, args, log)} is set by <rtc-agent>.
import { View, esc } from './base.js';
import { exampleFor } from '../lib/functions.js';
import { t } from '../lib/i18n.js';

const HISTORY = 20;

class FunctionDebugger extends View {
  static styles = View.css(`
    :host { display: grid; grid-template-columns: minmax(140px, 200px) 1fr; min-height: 0; flex: 1; }
    nav { border-right: 1px solid var(--rtc-color-border, #e3e6ee); overflow: auto; padding: 8px; background: var(--rtc-color-surface-2, #fafbfd); }
    nav .grp { font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: var(--rtc-color-muted, #687087); margin: 8px 0 4px; }
    nav ul { list-style: none; margin: 0; padding: 0; }
    nav button { width: 100%; text-align: left; border: 0; background: transparent; padding: 4px 6px; overflow-wrap: anywhere; }
    nav button[aria-current="true"] { background: var(--rtc-color-selected, #e6ecfb); }
    .main { overflow: auto; padding: 10px 12px; min-width: 0; }
    .main h2 { font-size: 15px; margin: 0 0 4px; overflow-wrap: anywhere; }
    textarea { width: 100%; min-height: 90px; font-family: ui-monospace, monospace; font-size: 12.5px; }
    pre { max-height: 220px; white-space: pre-wrap; overflow-wrap: anywhere; }
    .top { display: flex; gap: 8px; align-items: center; justify-content: space-between; }
    .status[data-kind="ok"] { color: var(--rtc-color-success, #1e6b32); }
    .status[data-kind="error"] { color: var(--rtc-color-danger, #9b2a20); }
    ol.logs { margin: 0; padding-left: 18px; font-family: ui-monospace, monospace; font-size: 12px; }
    ol.logs li[data-level="error"] { color: var(--rtc-color-danger, #9b2a20); }
    ol.logs li[data-level="warn"] { color: var(--rtc-color-warning, #7a5a00); }
    ul.history { list-style: none; padding: 0; margin: 0; font-size: 12px; }
    ul.history li { display: flex; gap: 6px; }
    h3 { margin: 10px 0 4px; font-size: 13px; }
    @container (max-width: 520px) { :host { grid-template-columns: 1fr; } nav { border-right: 0; border-bottom: 1px solid var(--rtc-color-border, #e3e6ee); max-height: 30vh; } }
  `);

  constructor() {
    super();
    this.selected = null;
    this.history = [];
    this.drafts = new Map(); // path -> the arguments typed
    this.root.addEventListener('click', (e) => this.onClick(e));
    this.root.addEventListener('input', (e) => {
      if (e.target.name === 'args' && this.selected) this.drafts.set(this.selected, e.target.value);
    });
  }

  set host(host) { this._host = host; this.render(); }
  get host() { return this._host; }

  onLocaleChange() { this.render(); }

  fns() { return this._host ? this._host.functions() : []; }

  render() {
    const fns = this.fns();
    if (this.selected && !fns.some((f) => f.path === this.selected)) this.selected = null;
    const groups = new Map();
    for (const fn of fns) {
      if (!groups.has(fn.group)) groups.set(fn.group, []);
      groups.get(fn.group).push(fn);
    }
    const nav = [...groups].map(([group, list]) => `
      <p class="grp">${esc(group || '—')}</p>
      <ul>${list.map((fn) => `<li><button type="button" data-path="${esc(fn.path)}" aria-current="${fn.path === this.selected}">${esc(fn.name)}</button></li>`).join('')}</ul>`).join('');
    const fn = fns.find((f) => f.path === this.selected);
    const keepRun = this.root.querySelector('[data-part=run-out]');
    this.root.innerHTML = `
      <nav aria-label="${esc(t('fn.title'))}">${fns.length ? nav : `<p class="muted">${esc(t('fn.none'))}</p>`}</nav>
      <div class="main">${fn ? this.detail(fn) : `<p class="muted">${esc(fns.length ? t('fn.pick') : t('fn.none'))}</p>`}
        ${this.historyHtml()}</div>`;
    if (fn && keepRun && this.lastRun && this.lastRun.path === fn.path) this.showRun(this.lastRun);
  }

  detail(fn) {
    const draft = this.drafts.has(fn.path) ? this.drafts.get(fn.path) : JSON.stringify(exampleFor(fn.parameters) ?? {}, null, 2);
    return `
      <div class="top"><h2 data-part="path">${esc(fn.path)}</h2><span class="muted">${esc(t('fn.class'))}: <b>${esc(fn.class)}</b></span></div>
      <p>${esc(fn.description)}</p>
      <details><summary>${esc(t('fn.schema'))}</summary><pre>${esc(JSON.stringify(fn.parameters, null, 2))}</pre></details>
      <label for="args"><h3>${esc(t('fn.params'))}</h3></label>
      <textarea id="args" name="args" spellcheck="false">${esc(draft)}</textarea>
      <div class="row"><button type="button" class="primary" data-act="run">${esc(t('fn.run'))}</button>
        <button type="button" data-act="example">${esc(t('fn.reset'))}</button>
        <span class="status grow" role="status" data-part="status"></span></div>
      <div data-part="run-out" hidden>
        <h3>${esc(t('fn.result'))}</h3><pre data-part="result"></pre>
        <h3>${esc(t('fn.logs'))}</h3><ol class="logs" data-part="logs"></ol>
      </div>`;
  }

  historyHtml() {
    if (!this.history.length) return '';
    return `<h3>${esc(t('fn.history'))}</h3><ul class="history" data-part="history">${this.history.map((h) => `
      <li data-ok="${h.ok}"><span>${h.ok ? '✓' : '✗'}</span><code>${esc(h.path)}</code><span class="muted">${esc(new Date(h.at).toLocaleTimeString())} · ${h.ms} ms</span></li>`).join('')}</ul>`;
  }

  onClick(e) {
    const btn = e.target.closest('button');
    if (!btn) return;
    if (btn.dataset.path) {
      this.selected = btn.dataset.path;
      this.render();
      this.root.querySelector('textarea')?.focus();
    } else if (btn.dataset.act === 'example') {
      this.drafts.delete(this.selected);
      this.render();
    } else if (btn.dataset.act === 'run') this.run();
  }

  async run() {
    const fn = this.fns().find((f) => f.path === this.selected);
    if (!fn || !this._host) return;
    const status = this.root.querySelector('[data-part=status]');
    const text = this.root.querySelector('textarea').value;
    let args;
    try { args = text.trim() ? JSON.parse(text) : {}; } catch (err) {
      status.dataset.kind = 'error';
      status.textContent = t('fn.badJson', { error: err.message });
      return;
    }
    status.dataset.kind = '';
    status.textContent = t('fn.running');
    const log = [];
    const started = performance.now();
    const restore = captureConsole(log);
    let run;
    try {
      const result = await this._host.call(fn, args, log);
      run = { path: fn.path, ok: true, result, log };
    } catch (err) {
      run = { path: fn.path, ok: false, error: String((err && err.message) || err), log };
    } finally { restore(); }
    run.ms = Math.round(performance.now() - started);
    run.at = Date.now();
    this.lastRun = run;
    this.history = [{ path: run.path, ok: run.ok, ms: run.ms, at: run.at }, ...this.history].slice(0, HISTORY);
    this.render();
    this.showRun(run);
  }

  showRun(run) {
    const status = this.root.querySelector('[data-part=status]');
    status.dataset.kind = run.ok ? 'ok' : 'error';
    status.textContent = t(run.ok ? 'fn.ok' : 'fn.failed', { ms: run.ms });
    const out = this.root.querySelector('[data-part=run-out]');
    out.hidden = false;
    this.root.querySelector('[data-part=result]').textContent = run.ok ? pretty(run.result) : run.error;
    this.root.querySelector('[data-part=logs]').innerHTML = run.log.map((l) =>
      `<li data-level="${esc(l.level)}">${esc(l.text)}</li>`).join('');
  }
}

const pretty = (v) => (typeof v === 'string' ? v : JSON.stringify(v, null, 2));

// What the page prints while the function runs goes to the log too (and still to the console).
function captureConsole(log) {
  const saved = {};
  for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
    saved[level] = console[level];
    console[level] = (...args) => {
      log.push({ level: level === 'log' || level === 'debug' ? 'info' : level, text: args.map((a) => (typeof a === 'string' ? a : safeJson(a))).join(' '), at: Date.now() });
      saved[level].apply(console, args);
    };
  }
  return () => { for (const [level, fn] of Object.entries(saved)) console[level] = fn; };
}

function safeJson(v) { try { return JSON.stringify(v); } catch { return String(v); } }

customElements.define('rtc-function-debugger', FunctionDebugger);
