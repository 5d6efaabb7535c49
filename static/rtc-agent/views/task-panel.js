// <rtc-task-panel>: what the open session works on beyond one answer, above its conversation:
//   * for a sub-agent's session, where it belongs ("Sub-agent of …") and the way back;
//   * the goal (`goal` entity: the active one, else the latest that ended): its condition, its
//     completed rounds of at most max_rounds, its state, and Cancel while active;
//   * the todo list (the session's `todo_list`, written by the agent's todoWrite): each item with
//     its state (pending, in progress: shown by its `active_form`, completed);
//   * the loops (`loop` entities): prompt, interval, runs, the next run (time and countdown) and
//     Stop while active; at most three that ended, newest first.
// The skeleton is built once and each part is rebuilt only when its HTML changes, so a focused
// button keeps its focus and the todo list stays open or closed while Updates stream in.
import { View, esc } from './base.js';
import { formatInterval } from '../lib/commands.js';
import { localInterval, t, tn, tOr } from '../lib/i18n.js';

const TODO_MARKS = { pending: '○', in_progress: '◐', completed: '✓' };
const interval = (seconds) => localInterval(formatInterval(seconds));
const ENDED_LOOPS = 3;
const TICK_MS = 10000; // the loops' countdowns are redrawn this often

class TaskPanel extends View {
  static styles = View.css(`
    :host { display: block; font-size: 12.5px; max-height: 38%; overflow: auto; }
    :host([hidden]) { display: none; }
    .part { padding: 4px 12px; border-bottom: 1px solid var(--rtc-color-surface-3, #eef0f5); }
    .lineage { background: #f4f1fb; color: #4b3a7a; display: flex; gap: 8px; align-items: center; }
    .lineage button, .goal button, .loops button { padding: 0 8px; font-size: 12px; }
    .goal { display: flex; gap: 8px; align-items: baseline; flex-wrap: wrap; background: #f3f8ff; }
    .goal .label, .todos summary b, .loops .label { font-weight: 600; }
    .goal .cond { flex: 1; min-width: 40%; overflow-wrap: anywhere; }
    .badge { font-size: 11px; border-radius: 10px; padding: 0 7px; background: var(--rtc-color-surface-3, #eef0f5); color: var(--rtc-color-text-2, #4a5266); white-space: nowrap; }
    .badge[data-status="active"] { background: var(--rtc-color-selected, #e6ecfb); color: var(--rtc-color-accent, #2952cc); }
    .badge[data-status="completed"] { background: #e2f4e6; color: #1e6b32; }
    .badge[data-status="exhausted"], .badge[data-status="cancelled"] { background: #fbe4e2; color: var(--rtc-color-danger, #9b2a20); }
    .todos summary { cursor: pointer; }
    .todos ol { list-style: none; margin: 4px 0 2px; padding: 0; }
    .todos li { display: flex; gap: 6px; align-items: baseline; padding: 1px 0; }
    .todos .mark { width: 1em; text-align: center; color: var(--rtc-color-muted, #687087); }
    .todos li[data-status="in_progress"] .mark { color: var(--rtc-color-accent, #2952cc); }
    .todos li[data-status="in_progress"] .text { font-weight: 600; }
    .todos li[data-status="completed"] .mark { color: #1e6b32; }
    .todos li[data-status="completed"] .text { text-decoration: line-through; color: var(--rtc-color-muted, #687087); }
    .loops ul { list-style: none; margin: 0; padding: 0; }
    .loops li { display: flex; gap: 8px; align-items: baseline; padding: 2px 0; }
    .loops li .what { flex: 1; min-width: 0; }
    .loops li .prompt { overflow-wrap: anywhere; }
    .loops li[data-status="active"] .icon { color: var(--rtc-color-accent, #2952cc); }
    .loops li:not([data-status="active"]) { color: var(--rtc-color-muted, #687087); }
    .sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
  `);

  constructor() {
    super();
    this.todosOpen = true;
    this.html = {};
    this.root.innerHTML = `
      <div class="part lineage" part="sub-agent-lineage" hidden></div>
      <div class="part goal" part="goal" role="group" data-i18n-aria-label="task.goal" hidden></div>
      <details class="part todos" part="todos" open hidden><summary></summary><ol data-i18n-aria-label="task.todos"></ol></details>
      <section class="part loops" part="loops" data-i18n-aria-label="task.loops" hidden><ul></ul></section>`;
    this.root.querySelector('details').addEventListener('toggle', (e) => { this.todosOpen = e.target.open; });
    this.root.addEventListener('click', (e) => this.onClick(e));
  }

  disconnectedCallback() { super.disconnectedCallback(); clearInterval(this.timer); this.timer = null; }

  onClick(e) {
    const btn = e.target.closest('button[data-act]');
    if (!btn || !this.agent) return;
    const act = btn.dataset.act;
    if (act === 'cancel-goal') this.agent.tasks.cancelGoalButton(btn.dataset.session);
    else if (act === 'stop-loop') { btn.disabled = true; this.agent.tasks.stopLoop(btn.dataset.loop); }
    else if (act === 'parent') this.agent.selectSession(btn.dataset.session);
  }

  // Set a part's HTML only when it changed; hide it when empty.
  put(sel, html) {
    const node = this.root.querySelector(sel);
    node.hidden = !html;
    if (this.html[sel] === html) return;
    this.html[sel] = html;
    const target = sel === '.todos' ? node.querySelector('ol') : sel === '.loops' ? node.querySelector('ul') : node;
    target.innerHTML = html;
  }

  update(state) {
    const sid = state.currentSession;
    const session = sid && state.sessions[sid];
    const store = this.agent.store;
    const loops = session ? store.sessionLoops(sid) : [];
    const shownLoops = [...loops.filter((l) => l.status === 'active'), ...loops.filter((l) => l.status !== 'active').slice(0, ENDED_LOOPS)];
    this.put('.lineage', session ? this.lineageHtml(session, state) : '');
    this.put('.goal', session ? this.goalHtml(store.sessionGoal(sid)) : '');
    const todos = session && Array.isArray(session.todo_list) ? session.todo_list : [];
    this.put('.todos', todos.map((item) => this.todoHtml(item)).join(''));
    const summary = this.root.querySelector('.todos summary');
    const done = todos.filter((item) => item.status === 'completed').length;
    const words = `<b>${esc(t('task.todos'))}</b> · ${esc(t('task.todosDone', { done, total: todos.length }))}`;
    if (summary.innerHTML !== words) summary.innerHTML = words;
    this.put('.loops', shownLoops.map((l) => this.loopHtml(l)).join(''));
    this.hidden = ['.lineage', '.goal', '.todos', '.loops'].every((sel) => this.root.querySelector(sel).hidden);
    // Countdowns move with the clock, not with Updates.
    const ticking = shownLoops.some((l) => l.status === 'active');
    if (ticking && !this.timer) this.timer = setInterval(() => this.update(this.agent.store.state), TICK_MS);
    else if (!ticking && this.timer) { clearInterval(this.timer); this.timer = null; }
  }

  lineageHtml(session, state) {
    const parentId = session.parent_server_session_id;
    if (!parentId) return '';
    const parent = state.sessions[parentId];
    const parentTitle = parent ? parent.title || t('sessions.untitled') : t('task.itsParent');
    // The sentence is escaped first; the two names are put in afterwards, escaped, in <b> / <i>.
    const sentence = esc(t('task.lineage', { title: '\u0001', parent: '\u0002' }))
      .replace('\u0001', `<b>${esc(session.title || t('sessions.untitled'))}</b>`)
      .replace('\u0002', `<i>${esc(parentTitle)}</i>`);
    return `<span aria-hidden="true">↳</span><span class="grow">${sentence}</span>`
      + `<button type="button" data-act="parent" data-session="${esc(parentId)}">${esc(t(parent ? 'task.backParent' : 'task.backParentConversation'))}</button>`;
  }

  goalHtml(goal) {
    if (!goal) return '';
    const active = goal.status === 'active';
    const rounds = t('task.rounds', { rounds: goal.rounds, max: goal.max_rounds });
    return `<span class="label">${esc(t('task.goal'))}</span><span class="cond">${esc(goal.condition)}</span>`
      + `<span class="rounds" title="${esc(t('task.roundsTitle', { max: goal.max_rounds }))}">${esc(rounds)}</span>`
      + `<span class="badge" data-status="${esc(goal.status)}">${esc(tOr(`task.goal.${goal.status}`, goal.status))}</span>`
      + (active ? `<button type="button" data-act="cancel-goal" data-session="${esc(goal.session_id)}">${esc(t('task.cancelGoal'))}</button>` : '');
  }

  todoHtml(item) {
    const status = TODO_MARKS[item.status] ? item.status : 'pending';
    // An item in progress reads as what is being done now ("Running the tests").
    const text = status === 'in_progress' && item.active_form ? item.active_form : item.content;
    return `<li data-status="${status}" title="${esc(item.content)}"><span class="mark" aria-hidden="true">${TODO_MARKS[status]}</span>`
      + `<span class="text">${esc(text)}</span><span class="sr">(${esc(t(`task.todo.${status}`))})</span></li>`;
  }

  loopHtml(l) {
    const every = t('task.every', { interval: interval(l.interval_seconds) });
    const runs = tn('task.runs', l.max_runs, { runs: l.runs, max: l.max_runs });
    let when = '';
    if (l.status === 'active' && l.next_run_at) when = ` · ${t('task.nextRun', { when: nextRun(l.next_run_at) })}`;
    else if (l.status !== 'active') when = ` · ${tOr(`task.loop.${l.status}`, l.status)}`;
    const stop = l.status === 'active'
      ? `<button type="button" data-act="stop-loop" data-loop="${esc(l.id)}" aria-label="${esc(t('task.stopLabel', { prompt: l.prompt.slice(0, 80) }))}">${esc(t('task.stop'))}</button>` : '';
    return `<li data-loop="${esc(l.id)}" data-status="${esc(l.status)}"><span class="icon" aria-hidden="true">↻</span>`
      + `<span class="what"><span class="prompt">${esc(l.prompt)}</span> <span class="muted">${esc(every)} · ${esc(runs)}${esc(when)}</span></span>${stop}</li>`;
  }
}

// "14:05:30 (in 4 min)", "14:05:30 (due now)"; the date too when it is not today.
export function nextRun(iso, now = Date.now()) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const today = new Date(now).toDateString() === d.toDateString();
  const clock = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  const at = today ? clock : `${d.toLocaleDateString()} ${clock}`;
  const left = Math.round((d.getTime() - now) / 1000);
  return `${at} (${left <= 0 ? t('task.dueNow') : t('task.in', { interval: interval(left < 60 ? left : Math.round(left / 60) * 60) })})`;
}

customElements.define('rtc-task-panel', TaskPanel);
