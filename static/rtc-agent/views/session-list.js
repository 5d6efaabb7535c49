// <rtc-session-list>: the user's sessions with new, rename, compact, archive (close/open) and
// soft delete and the context ring of each session (views/context-ring.js).
import { View, esc } from './base.js';
import { t } from '../lib/i18n.js';
import { ringSvg } from './context-ring.js';

class SessionList extends View {
  static styles = View.css(`
    :host { display: block; overflow: auto; border-right: 1px solid var(--rtc-color-border, #e3e6ee); background: var(--rtc-color-surface-2, #fafbfd); }
    .top { padding: 8px; position: sticky; top: 0; background: var(--rtc-color-surface-2, #fafbfd); }
    ul { list-style: none; margin: 0; padding: 0 6px 8px; }
    li { padding: 6px; border-radius: 6px; cursor: pointer; }
    li[aria-current="true"] { background: var(--rtc-color-selected, #e6ecfb); }
    li .acts { display: none; gap: 4px; margin-top: 4px; }
    li[aria-current="true"] .acts { display: flex; flex-wrap: wrap; }
    li .acts button { padding: 0 6px; font-size: 12px; }
    .closed .title { text-decoration: line-through; color: var(--rtc-color-muted, #687087); }
    .title { display: block; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
    button.pick { all: unset; display: block; min-width: 0; flex: 1; overflow: hidden; cursor: pointer; border-radius: 4px; }
    button.pick:focus-visible { outline: 2px solid var(--rtc-color-focus, #2952cc); outline-offset: 2px; }
  `);

  constructor() {
    super();
    this.root.addEventListener('click', (e) => this.onClick(e));
  }

  // Every store change calls this, for whatever changed. Replacing the buttons under a click
  // that is in progress (pressed, not yet released) loses the click, so the list's elements are
  // kept: nothing is touched when the markup is the same, rows are matched by session, and a row
  // that changed is patched in place (see morph).
  update(state) {
    const sessions = this.agent.store.visibleSessions();
    const cur = state.currentSession;
    const top = `<div class="top"><button class="primary" data-act="new" style="width:100%">${esc(t('sessions.new'))}</button></div>
      <ul part="sessions" aria-label="${esc(t('sessions.list'))}"></ul>`;
    const rows = sessions.map((s) => [s.id, `
        <li data-id="${esc(s.id)}" aria-current="${s.id === cur}" class="${s.status === 'closed' ? 'closed' : ''}">
          <div class="row"><button type="button" class="pick"><span class="title grow">${esc(s.title || t('sessions.untitled'))}</span></button>${ringSvg(s)}</div>
          <div class="muted">${esc(s.status)}${s.status === 'active' ? ` · ${esc(t('sessions.working'))}` : ''}</div>
          <div class="acts">
            <button data-act="rename">${esc(t('sessions.rename'))}</button>
            <button data-act="compact" title="${esc(t('sessions.compactTitle'))}">${esc(t('sessions.compact'))}</button>
            ${s.status === 'closed' ? `<button data-act="open">${esc(t('sessions.unarchive'))}</button>` : `<button data-act="close">${esc(t('sessions.archive'))}</button>`}
            <button data-act="delete" class="danger">${esc(t('sessions.delete'))}</button>
          </div>
        </li>`]);
    const markup = top + rows.map(([, html]) => html).join('');
    if (markup === this.markup) return;
    this.markup = markup;
    if (top !== this.top) {
      this.top = top;
      this.root.innerHTML = top;
      this.rows = new Map(); // id -> li
    }
    const ul = this.root.querySelector('ul');
    const kept = new Map();
    rows.forEach(([id, html], i) => {
      const next = fragment(html).firstElementChild;
      let li = this.rows.get(id);
      if (li) morph(li, next);
      else li = next;
      if (ul.children[i] !== li) ul.insertBefore(li, ul.children[i] || null);
      kept.set(id, li);
    });
    for (const [id, li] of this.rows) if (!kept.has(id)) li.remove();
    this.rows = kept;
  }

  onClick(e) {
    const btn = e.target.closest('button');
    const li = e.target.closest('li');
    const id = li && li.dataset.id;
    const act = btn && btn.dataset.act;
    if (act === 'new') return this.agent.selectSession(null);
    if (!id) return;
    if (!act) return this.agent.selectSession(id);
    const s = this.agent.store.state.sessions[id];
    if (act === 'rename') {
      const title = prompt(t('sessions.renamePrompt'), s.title || '');
      if (title !== null) this.agent.rename(id, title);
    } else if (act === 'compact') this.agent.compact(id);
    else if (act === 'close') this.agent.archive(id);
    else if (act === 'open') this.agent.unarchive(id);
    else if (act === 'delete' && confirm(t('sessions.deleteConfirm', { title: s.title || t('sessions.untitled') }))) this.agent.remove(id);
  }
}

const fragment = (html) => {
  const tpl = document.createElement('template');
  tpl.innerHTML = html.trim();
  return tpl.content;
};

// Makes `node` show what `next` shows, keeping every element whose kind and action stay the
// same (a changed action, Archive becoming Unarchive, is a new button: a press on the old one
// must not run the new action).
function morph(node, next) {
  const same = node.nodeName === next.nodeName && (node.nodeType !== Node.ELEMENT_NODE
    || (node.getAttribute('data-act') === next.getAttribute('data-act') && node.getAttribute('data-id') === next.getAttribute('data-id')));
  if (!same) { node.replaceWith(next); return; }
  if (node.nodeType !== Node.ELEMENT_NODE) {
    if (node.nodeValue !== next.nodeValue) node.nodeValue = next.nodeValue;
    return;
  }
  for (const { name } of [...node.attributes]) if (!next.hasAttribute(name)) node.removeAttribute(name);
  for (const { name, value } of [...next.attributes]) if (node.getAttribute(name) !== value) node.setAttribute(name, value);
  const have = [...node.childNodes];
  const want = [...next.childNodes];
  want.forEach((child, i) => (have[i] ? morph(have[i], child) : node.append(child)));
  for (const child of have.slice(want.length)) child.remove();
}

customElements.define('rtc-session-list', SessionList);
