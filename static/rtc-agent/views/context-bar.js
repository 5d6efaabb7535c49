// <rtc-context-bar>: one line above the open session's conversation: the context ring with its
// figures in words (views/context-ring.js), and "Session memories (n)", which opens the list of
// what was saved to memory in this session (lib/memories.js: fetched when the session opens, when
// a memory tool's result arrives, when a turn ends and when the list is opened). The skeleton is
// built once and only its text changes, so the toggle keeps its focus while Updates stream in.
import { View, esc } from './base.js';
import { contextFigures, ringSvg } from './context-ring.js';
import { getLocale, t, tOr } from '../lib/i18n.js';

class ContextBar extends View {
  static styles = View.css(`
    :host { display: block; border-bottom: 1px solid var(--rtc-color-border, #e3e6ee); font-size: 12.5px; }
    :host([hidden]) { display: none; }
    .bar { display: flex; gap: 8px; align-items: center; padding: 4px 12px; }
    .bar .ringbox { display: inline-flex; }
    .bar button { padding: 0 8px; font-size: 12px; }
    .pct[data-level="near"] { color: #d9480f; } .pct[data-level="over"] { color: var(--rtc-color-danger, #b3261e); }
    section { padding: 4px 12px 8px; max-height: 180px; overflow: auto; background: var(--rtc-color-surface-2, #fafbfd); border-top: 1px solid var(--rtc-color-surface-3, #eef0f5); }
    ul { list-style: none; margin: 0; padding: 0; }
    li { padding: 3px 0; display: flex; gap: 6px; align-items: baseline; border-bottom: 1px dashed var(--rtc-color-surface-3, #eef0f5); }
    li:last-child { border-bottom: 0; }
    .cat { font-size: 11px; border-radius: 10px; padding: 0 7px; background: var(--rtc-color-surface-3, #eef0f5); color: var(--rtc-color-text-2, #4a5266); white-space: nowrap; }
    .content { white-space: pre-wrap; flex: 1; min-width: 0; overflow-wrap: anywhere; }
    .status:empty { display: none; }
    .status[data-state="error"] { color: var(--rtc-color-danger, #9b2a20); }
    .foot { margin-top: 4px; }
  `);

  constructor() {
    super();
    this.open = false;
    this.root.innerHTML = `
      <div class="bar" part="context-bar">
        <span class="ringbox"></span>
        <span class="grow"><b class="pct"></b> <span class="muted detail"></span></span>
        <button type="button" data-act="toggle" aria-expanded="false" aria-controls="session-memories"><span data-i18n="ctx.sessionMemories"></span> <span class="count"></span></button>
      </div>
      <section id="session-memories" part="session-memories" data-i18n-aria-label="ctx.savedHere" hidden>
        <div class="status muted" role="status"></div>
        <ul data-i18n-aria-label="ctx.savedHere"></ul>
        <div class="foot"><button type="button" data-act="page" data-i18n="ctx.allMemories"></button></div>
      </section>`;
    this.root.addEventListener('click', (e) => {
      const act = e.target.closest('button')?.dataset.act;
      if (act === 'toggle') this.toggle();
      else if (act === 'page') this.agent.memories.openPage();
      else if (act === 'retry') this.agent.memories.loadSession(this.agent.store.state.currentSession);
    });
  }

  toggle() {
    this.open = !this.open;
    const sid = this.agent.store.state.currentSession;
    if (this.open && sid) this.agent.memories.refreshSession(sid, 0);
    this.update(this.agent.store.state);
  }

  update(state) {
    const sid = state.currentSession;
    const session = sid && state.sessions[sid];
    this.hidden = !session;
    if (!session) return;
    const f = contextFigures(session);
    const ring = ringSvg(session, 20);
    const box = this.root.querySelector('.ringbox');
    if (this._ring !== ring) { box.innerHTML = ring; this._ring = ring; }
    const pct = this.root.querySelector('.pct');
    pct.textContent = t('ctx.pct', { pct: f.pct });
    pct.dataset.level = f.level;
    this.root.querySelector('.detail').textContent = [f.tokens, f.rounds, f.cost].filter(Boolean).join(' · ');

    const mem = state.sessionMemories[sid] || { status: 'loading' };
    const notes = mem.notes || [];
    const saved = mem.saved || [];
    const count = notes.length + saved.length;
    this.root.querySelector('.count').textContent = `(${count})`;
    const toggle = this.root.querySelector('[data-act=toggle]');
    toggle.setAttribute('aria-expanded', String(this.open));
    const section = this.root.querySelector('section');
    section.hidden = !this.open;
    if (!this.open) return;
    const status = this.root.querySelector('.status');
    status.dataset.state = mem.status;
    if (mem.status === 'error') {
      const key = `${getLocale()} ${mem.error}`;
      if (status.dataset.error !== key) {
        status.innerHTML = `${esc(t('ctx.loadError', { error: mem.error }))} <button type="button" data-act="retry">${esc(t('mem.retry'))}</button>`;
        status.dataset.error = key;
      }
    } else {
      status.dataset.error = '';
      status.textContent = mem.status === 'loading' && !count ? t('mem.loading')
        : !count ? t('ctx.empty') : '';
    }
    // Saved for later sessions first (the user's own memories, also on the memories page), then
    // the session's notes (what compaction and later turns of this session start from).
    const row = (m, kind, tag) => `<li data-kind="${kind}" data-id="${esc(m.id)}"><span class="cat" title="${esc(t(kind === 'user' ? 'ctx.keptTitle' : 'ctx.noteTitle'))}">${esc(tag)}</span>`
      + `<span class="content">${esc(m.content)}</span>`
      + (m.created_at ? `<time class="muted" datetime="${esc(m.created_at)}">${esc(shortTime(m.created_at))}</time>` : '')
      + '</li>';
    const word = (kind, v, none) => (v ? tOr(`mem.${kind}.${v}`, v) : t(none));
    const html = saved.map((m) => row(m, 'user', `${word('cat', m.category, 'ctx.memory')} · ${m.importance ? word('imp', m.importance) : ''}`)).join('')
      + notes.map((m) => row(m, 'session', m.category ? tOr(`mem.cat.${m.category}`, m.category) : t('ctx.note'))).join('');
    const list = this.root.querySelector('ul');
    if (this._list !== html) { list.innerHTML = html; this._list = html; }
  }
}

export function shortTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : d.toLocaleDateString();
}

customElements.define('rtc-context-bar', ContextBar);
