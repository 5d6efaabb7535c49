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

  update(state) {
    const sessions = this.agent.store.visibleSessions();
    const cur = state.currentSession;
    this.root.innerHTML = `
      <div class="top"><button class="primary" data-act="new" style="width:100%">${esc(t('sessions.new'))}</button></div>
      <ul part="sessions" aria-label="${esc(t('sessions.list'))}">${sessions.map((s) => `
        <li data-id="${esc(s.id)}" aria-current="${s.id === cur}" class="${s.status === 'closed' ? 'closed' : ''}">
          <div class="row"><button type="button" class="pick"><span class="title grow">${esc(s.title || t('sessions.untitled'))}</span></button>${ringSvg(s)}</div>
          <div class="muted">${esc(s.status)}${s.status === 'active' ? ` · ${esc(t('sessions.working'))}` : ''}</div>
          <div class="acts">
            <button data-act="rename">${esc(t('sessions.rename'))}</button>
            <button data-act="compact" title="${esc(t('sessions.compactTitle'))}">${esc(t('sessions.compact'))}</button>
            ${s.status === 'closed' ? `<button data-act="open">${esc(t('sessions.unarchive'))}</button>` : `<button data-act="close">${esc(t('sessions.archive'))}</button>`}
            <button data-act="delete" class="danger">${esc(t('sessions.delete'))}</button>
          </div>
        </li>`).join('')}</ul>`;
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

customElements.define('rtc-session-list', SessionList);
