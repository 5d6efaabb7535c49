// <rtc-memory-page>: the user's own memories (the long-term ones the agent keeps across
// sessions), in place of the conversation while it is open. Search (words), filters (category,
// importance), Load more, Edit (content, category, importance) and Delete (asked in place, never
// a browser dialog), and Export JSON (a download of all of them). Everything goes through
// lib/memories.js and the owner-only HTTP API. Keyboard: the form and every action are buttons
// and labelled fields in reading order; Escape cancels an edit or a delete question, else closes
// the page; focus goes where the user's next step is (the field being edited, "Keep it", back to
// the item's button). Items are keyed nodes rebuilt only when they change, so Updates streaming
// in meanwhile never eat what is being typed.
import { View, esc } from './base.js';
import { getLocale, t, tn, tOr } from '../lib/i18n.js';
import { IMPORTANCE, USER_CATEGORIES } from '../lib/memories.js';
import { shortTime } from './context-bar.js';

const SEARCH_DELAY = 300; // ms after the last keystroke

class MemoryPage extends View {
  static styles = View.css(`
    :host { display: flex; flex-direction: column; min-height: 0; flex: 1; }
    .head { display: flex; gap: 8px; align-items: center; padding: 8px 12px; border-bottom: 1px solid var(--rtc-color-border, #e3e6ee); }
    h2 { font-size: 15px; margin: 0; flex: 1; }
    form.filters { display: flex; flex-wrap: wrap; gap: 8px; padding: 8px 12px; align-items: end; }
    .field { display: flex; flex-direction: column; gap: 2px; }
    .field label { font-size: 12px; color: var(--rtc-color-text-2, #4a5266); }
    .field.q { flex: 1; min-width: 160px; }
    .status-row { padding: 0 12px 6px; }
    .status-row button { padding: 0 8px; font-size: 12px; }
    .status { font-size: 12px; color: var(--rtc-color-muted, #687087); }
    .status[data-state="error"] { color: var(--rtc-color-danger, #9b2a20); }
    .scroll { flex: 1; overflow: auto; padding: 0 12px 12px; }
    ul { list-style: none; margin: 0; padding: 0; }
    li { border: 1px solid var(--rtc-color-border, #e3e6ee); border-radius: 8px; padding: 8px 10px; margin-bottom: 8px; }
    li:focus-within { border-color: #9fb3ec; }
    .meta { display: flex; gap: 6px; align-items: center; flex-wrap: wrap; font-size: 12px; }
    .tag { font-size: 11px; border-radius: 10px; padding: 0 7px; background: var(--rtc-color-surface-3, #eef0f5); color: var(--rtc-color-text-2, #4a5266); }
    .tag[data-importance="high"] { background: #ffe8cc; color: #8a4b00; }
    .tag[data-importance="critical"] { background: #fbe4e2; color: var(--rtc-color-danger, #9b2a20); }
    .tag[data-importance="low"] { background: #e2f4e6; color: #1e6b32; }
    .content { white-space: pre-wrap; overflow-wrap: anywhere; margin: 4px 0; }
    .acts { display: flex; gap: 6px; }
    .acts button { padding: 0 8px; font-size: 12px; }
    form.edit textarea { width: 100%; min-height: 70px; resize: vertical; }
    form.edit .row { margin: 6px 0; flex-wrap: wrap; }
    .ask { background: var(--rtc-color-danger-bg, #fdf1f0); border-radius: 6px; padding: 6px 8px; margin-top: 4px; }
    .err { color: var(--rtc-color-danger, #9b2a20); font-size: 12px; }
    .err:empty { display: none; }
    .more { margin-top: 4px; }
  `);

  constructor() {
    super();
    this.modes = new Map(); // memory id -> 'edit' | 'ask' (a delete waiting for its answer)
    this.errors = new Map(); // memory id -> the server's refusal of the last edit or delete
    this.busy = new Set();
    this.nodes = new Map(); // memory id -> {node, sig}
    this.timer = null;
    this.root.innerHTML = `
      <div class="head"><h2 id="memories-title" data-i18n="mem.title"></h2>
        <button type="button" data-act="export" data-i18n="mem.export"></button>
        <button type="button" data-act="close" data-i18n="mem.back"></button></div>
      <form class="filters" role="search" data-i18n-aria-label="mem.searchForm">
        <div class="field q"><label for="filter-q" data-i18n="mem.search"></label><input id="filter-q" type="search" name="q" data-i18n-placeholder="mem.searchPlaceholder" autocomplete="off"></div>
        <div class="field"><label for="filter-category" data-i18n="mem.category"></label><select id="filter-category" name="category"><option value="" data-i18n="mem.allCategories"></option>
          ${USER_CATEGORIES.map((c) => `<option value="${c}" data-i18n="mem.cat.${c}"></option>`).join('')}</select></div>
        <div class="field"><label for="filter-importance" data-i18n="mem.importance"></label><select id="filter-importance" name="importance"><option value="" data-i18n="mem.anyImportance"></option>
          ${IMPORTANCE.map((c) => `<option value="${c}" data-i18n="mem.imp.${c}"></option>`).join('')}</select></div>
      </form>
      <div class="row status-row"><div class="status grow" role="status" aria-live="polite"></div>
        <button type="button" data-act="retry" data-i18n="mem.retry" hidden></button></div>
      <div class="scroll"><ul aria-labelledby="memories-title"></ul>
        <button type="button" class="more" data-act="more" data-i18n="mem.more" hidden></button></div>`;
    this.form = this.root.querySelector('form.filters');
    this.list = this.root.querySelector('ul');
    this.form.addEventListener('submit', (e) => { e.preventDefault(); this.searchNow(); });
    this.form.addEventListener('input', (e) => {
      if (e.target.name !== 'q') return;
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.searchNow(), SEARCH_DELAY);
    });
    this.form.addEventListener('change', (e) => { if (e.target.tagName === 'SELECT') this.searchNow(); });
    this.root.addEventListener('click', (e) => this.onClick(e));
    this.root.addEventListener('submit', (e) => {
      const form = e.target.closest('form.edit');
      if (form) { e.preventDefault(); this.save(form); }
    });
    this.root.addEventListener('keydown', (e) => {
      if (e.key !== 'Escape') return;
      e.stopPropagation();
      const li = e.target.closest && e.target.closest('li[data-id]');
      if (li && this.modes.has(li.dataset.id)) this.setMode(li.dataset.id, null, `[data-act=${this.modes.get(li.dataset.id) === 'ask' ? 'delete' : 'edit'}]`);
      else this.agent.memories.closePage();
    });
  }

  // Called by <rtc-agent> when the page is shown: the fields show the search that is run.
  shown() {
    const page = this.agent.store.state.memoryPage;
    const filters = (page && page.filters) || {};
    for (const name of ['q', 'category', 'importance']) this.form.elements[name].value = filters[name] || '';
    this.form.elements.q.focus();
  }

  searchNow() {
    clearTimeout(this.timer);
    this.notice = '';
    const f = this.form.elements;
    this.agent.memories.search({ q: f.q.value, category: f.category.value, importance: f.importance.value });
  }

  update(state) {
    const page = state.memoryPage;
    if (state.page !== 'memories' || !page) return;
    const status = this.root.querySelector('.status');
    const count = page.items.length;
    status.dataset.state = page.status;
    const filtered = page.filters.q || page.filters.category || page.filters.importance;
    let text;
    if (page.status === 'error') text = t('mem.loadError', { error: page.error });
    else if (page.status === 'loading' && !count) text = t('mem.loading');
    else if (!count) text = t(filtered ? 'mem.noMatch' : 'mem.empty');
    else text = tn(page.next ? 'mem.countMore' : 'mem.count', count);
    if (this.notice) text = `${this.notice} ${text}`;
    if (status.textContent !== text) status.textContent = text;
    this.root.querySelector('[data-act=retry]').hidden = page.status !== 'error';
    // Never `disabled` while loading: that would drop the keyboard focus (more() ignores a
    // press while a page is on its way).
    const more = this.root.querySelector('[data-act=more]');
    more.hidden = !page.next;
    more.setAttribute('aria-busy', String(page.status === 'loading'));
    this.renderItems(page.items);
  }

  renderItems(items) {
    const keep = new Set(items.map((m) => String(m.id)));
    for (const [id, entry] of this.nodes) {
      if (!keep.has(id)) { entry.node.remove(); this.nodes.delete(id); this.modes.delete(id); }
    }
    let prev = null;
    for (const m of items) {
      const id = String(m.id); // memory ids are numbers; the DOM's are strings
      const mode = this.modes.get(id) || '';
      const sig = JSON.stringify([m, mode, this.errors.get(id) || '', this.busy.has(id), getLocale()]);
      let entry = this.nodes.get(id);
      if (!entry || entry.sig !== sig) {
        const node = document.createElement('li');
        node.dataset.id = id;
        node.innerHTML = this.itemHtml(m, mode);
        // An edit in progress keeps what was typed when the node is rebuilt (a save failed).
        const draft = entry && entry.node.querySelector('form.edit');
        if (draft && mode === 'edit') {
          for (const name of ['content', 'category', 'importance']) node.querySelector(`[name=${name}]`).value = draft.elements[name].value;
        }
        if (entry) entry.node.replaceWith(node);
        entry = { node, sig };
        this.nodes.set(id, entry);
      }
      const expected = prev ? prev.nextSibling : this.list.firstChild;
      if (expected !== entry.node) this.list.insertBefore(entry.node, expected);
      prev = entry.node;
    }
  }

  itemHtml(m, mode) {
    const short = String(m.content || '').slice(0, 40);
    const busy = this.busy.has(String(m.id)) ? ' disabled' : '';
    const err = `<div class="err" role="alert">${esc(this.errors.get(String(m.id)) || '')}</div>`;
    const edited = Date.parse(m.updated_at) - Date.parse(m.created_at) > 1000; // not the save itself
    const when = esc(t('mem.saved', { time: shortTime(m.created_at) }))
      + (edited ? ` · ${esc(t('mem.edited', { time: shortTime(m.updated_at) }))}` : '');
    const meta = `<div class="meta"><span class="tag" data-category="${esc(m.category)}">${esc(categoryWord(m.category))}</span>`
      + `<span class="tag" data-importance="${esc(m.importance)}">${esc(importanceWord(m.importance))}</span><span class="muted">${when}</span></div>`;
    if (mode === 'edit') {
      const options = (list, value, word) => (list.includes(value) ? list : [value, ...list])
        .map((c) => `<option value="${esc(c)}"${c === value ? ' selected' : ''}>${esc(word(c))}</option>`).join('');
      const f = `memory-${esc(m.id)}`; // ids are unique within this shadow root
      return `${meta}<form class="edit" novalidate aria-label="${esc(t('mem.editForm'))}">
        <div class="field"><label for="${f}-content">${esc(t('mem.memory'))}</label><textarea id="${f}-content" name="content">${esc(m.content)}</textarea></div>
        <div class="row"><div class="field"><label for="${f}-category">${esc(t('mem.category'))}</label><select id="${f}-category" name="category">${options(USER_CATEGORIES, m.category, categoryWord)}</select></div>
          <div class="field"><label for="${f}-importance">${esc(t('mem.importance'))}</label><select id="${f}-importance" name="importance">${options(IMPORTANCE, m.importance, importanceWord)}</select></div></div>
        ${err}<div class="acts"><button type="submit" class="primary"${busy}>${esc(t('mem.save'))}</button><button type="button" data-act="cancel"${busy}>${esc(t('mem.cancel'))}</button></div></form>`;
    }
    const ask = mode === 'ask'
      ? `<div class="ask" role="group" aria-label="${esc(t('mem.deleteAsk'))}">${esc(t('mem.deleteWarn'))}
          <div class="acts"><button type="button" class="danger" data-act="confirm-delete"${busy}>${esc(t('mem.delete'))}</button><button type="button" data-act="cancel"${busy}>${esc(t('mem.keep'))}</button></div></div>`
      : `<div class="acts"><button type="button" data-act="edit" aria-label="${esc(t('mem.editLabel', { text: short }))}">${esc(t('mem.edit'))}</button>`
        + `<button type="button" class="danger" data-act="delete" aria-label="${esc(t('mem.deleteLabel', { text: short }))}">${esc(t('mem.delete'))}</button></div>`;
    return `${meta}<div class="content">${esc(m.content)}</div>${mode === 'ask' ? '' : err}${ask}${mode === 'ask' ? err : ''}`;
  }

  // Show an item in another mode (null: back to reading it), then focus `focus` inside it.
  setMode(id, mode, focus) {
    if (mode) this.modes.set(id, mode); else this.modes.delete(id);
    this.errors.delete(id);
    this.renderItems(this.agent.store.state.memoryPage.items);
    const node = this.nodes.get(id);
    const target = node && focus && node.node.querySelector(focus);
    if (target) target.focus();
  }

  onClick(e) {
    const btn = e.target.closest('button[data-act]');
    if (!btn) return;
    const act = btn.dataset.act;
    const id = btn.closest('li[data-id]')?.dataset.id;
    if (act === 'close') this.agent.memories.closePage();
    else if (act === 'export') this.exportAll(btn);
    else if (act === 'more') this.agent.memories.more();
    else if (act === 'retry') this.agent.memories.retry();
    else if (act === 'edit') this.setMode(id, 'edit', 'textarea');
    else if (act === 'delete') this.setMode(id, 'ask', '[data-act=cancel]');
    else if (act === 'cancel') this.setMode(id, null, `[data-act=${this.modes.get(id) === 'ask' ? 'delete' : 'edit'}]`);
    else if (act === 'confirm-delete') this.remove(id);
  }

  async save(form) {
    const id = form.closest('li').dataset.id;
    const item = this.agent.store.state.memoryPage.items.find((m) => String(m.id) === id);
    const patch = {};
    for (const name of ['content', 'category', 'importance']) {
      const value = name === 'content' ? form.elements[name].value.trim() : form.elements[name].value;
      if (value !== item[name]) patch[name] = value;
    }
    if (patch.content === '') return this.fail(id, t('mem.emptyContent'), 'textarea');
    if (!Object.keys(patch).length) return this.setMode(id, null, '[data-act=edit]');
    await this.run(id, async () => {
      await this.agent.memories.update(id, patch);
      this.modes.delete(id);
    }, '[data-act=edit]', 'textarea');
  }

  async remove(id) {
    const items = this.agent.store.state.memoryPage.items;
    const next = items[items.findIndex((m) => String(m.id) === id) + 1];
    await this.run(id, () => this.agent.memories.remove(id), null, '[data-act=cancel]');
    if (this.nodes.has(id)) return; // refused: the question stays, with the reason
    const after = next && this.nodes.get(String(next.id));
    (after ? after.node.querySelector('[data-act=edit]') : this.form.elements.q).focus();
  }

  // Run one request for an item: its buttons are disabled meanwhile; a refusal is shown in the
  // item (nothing changed), and focus goes to `done` or, after a refusal, to `retry`.
  async run(id, work, done, retry) {
    this.busy.add(id);
    this.errors.delete(id);
    this.renderItems(this.agent.store.state.memoryPage.items);
    try {
      await work();
      this.busy.delete(id);
      this.renderItems(this.agent.store.state.memoryPage.items);
      const target = done && this.nodes.get(id)?.node.querySelector(done);
      if (target) target.focus();
    } catch (err) {
      this.busy.delete(id);
      this.fail(id, err.message, retry);
    }
  }

  fail(id, message, focus) {
    this.errors.set(id, message);
    this.renderItems(this.agent.store.state.memoryPage.items);
    const target = focus && this.nodes.get(id)?.node.querySelector(focus);
    if (target) target.focus();
  }

  // The button stays enabled (a disabled button drops the keyboard focus); a second press while
  // the file is on its way does nothing.
  async exportAll(btn) {
    if (this.exporting) return;
    this.exporting = true;
    btn.setAttribute('aria-busy', 'true');
    this.notice = '';
    try {
      const { blob, filename } = await this.agent.memories.exportFile();
      const a = document.createElement('a');
      a.href = URL.createObjectURL(blob);
      a.download = filename;
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 1000);
      this.notice = t('mem.exported', { file: filename });
    } catch (err) {
      this.notice = t('mem.exportFailed', { error: err.message });
    } finally {
      this.exporting = false;
      btn.removeAttribute('aria-busy');
      this.agent.store.changed();
    }
  }
}

// A category or an importance in words (values the widget does not know are shown as they are).
export const categoryWord = (c) => tOr(`mem.cat.${c}`, c);
export const importanceWord = (c) => tOr(`mem.imp.${c}`, c);

customElements.define('rtc-memory-page', MemoryPage);
