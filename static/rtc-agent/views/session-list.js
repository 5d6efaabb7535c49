// <rtc-session-list>: the user's sessions with new, rename, compact, archive (close/open) and
// soft delete and the context ring of each session (views/context-ring.js).
import { View, esc } from './base.js';
import { ringSvg } from './context-ring.js';

class SessionList extends View {
  static styles = View.css(`
    :host { display: block; overflow: auto; border-right: 1px solid #e3e6ee; background: #fafbfd; }
    .top { padding: 8px; position: sticky; top: 0; background: #fafbfd; }
    ul { list-style: none; margin: 0; padding: 0 6px 8px; }
    li { padding: 6px; border-radius: 6px; cursor: pointer; }
    li[aria-current="true"] { background: #e6ecfb; }
    li .acts { display: none; gap: 4px; margin-top: 4px; }
    li[aria-current="true"] .acts { display: flex; flex-wrap: wrap; }
    li .acts button { padding: 0 6px; font-size: 12px; }
    .closed .title { text-decoration: line-through; color: #687087; }
    .title { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  `);

  constructor() {
    super();
    this.root.addEventListener('click', (e) => this.onClick(e));
  }

  update(state) {
    const sessions = this.agent.store.visibleSessions();
    const cur = state.currentSession;
    this.root.innerHTML = `
      <div class="top"><button class="primary" data-act="new" style="width:100%">+ New chat</button></div>
      <ul part="sessions">${sessions.map((s) => `
        <li data-id="${esc(s.id)}" aria-current="${s.id === cur}" class="${s.status === 'closed' ? 'closed' : ''}">
          <div class="row"><span class="title grow">${esc(s.title || 'Untitled')}</span>${ringSvg(s)}</div>
          <div class="muted">${esc(s.status)}${s.status === 'active' ? ' · working…' : ''}</div>
          <div class="acts">
            <button data-act="rename">Rename</button>
            <button data-act="compact" title="Summarize the conversation so far to free context">Compact</button>
            ${s.status === 'closed' ? '<button data-act="open">Unarchive</button>' : '<button data-act="close">Archive</button>'}
            <button data-act="delete" class="danger">Delete</button>
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
      const title = prompt('Rename session', s.title || '');
      if (title !== null) this.agent.rename(id, title);
    } else if (act === 'compact') this.agent.compact(id);
    else if (act === 'close') this.agent.archive(id);
    else if (act === 'open') this.agent.unarchive(id);
    else if (act === 'delete' && confirm(`Delete "${s.title || 'Untitled'}"?`)) this.agent.remove(id);
  }
}

customElements.define('rtc-session-list', SessionList);
