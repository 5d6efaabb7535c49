// Sub-agents in the conversation: a session started by the subAgent tool is a child session
// (`parent_server_session_id`, and `sub_agent_parent_message_id`: the message of the parent that
// started it). The message list draws, under that message, the tree of the sub-agents it
// started: each with its title, its state (working, done, failed, stopped), its latest words,
// "Open" (its conversation, read-only) and, nested, the sub-agents it started in turn.
// Children whose starting message is not on screen are drawn at the end of the conversation.
import { t, tn } from '../lib/i18n.js';

const MAX_DEPTH = 6; // deeper levels are summarised as a count (Open shows them)
const SNIPPET = 160;

// A child session's state, in words: its status, and how its last turn ended.
export function subAgentState(session, messages) {
  if (session.status === 'active') return 'working';
  if (session.status === 'closed') return 'stopped';
  const last = messages[messages.length - 1];
  return last && last.content && last.content.type === 'error' ? 'failed' : 'done';
}

// The latest thing the sub-agent said (or the error it ended with), shortened.
function lastWords(messages, streams) {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    const { type, data } = m.content || {};
    let text = '';
    if (type === 'markdown' || type === 'text') {
      text = (streams[m.id] && streams[m.id].text) || (typeof data === 'string' ? data : (data && data.text) || '');
    } else if (type === 'error') text = `${(data && data.title) || t('sa.error')}: ${(data && data.message) || ''}`;
    text = text.replace(/\s+/g, ' ').trim();
    if (text) return text.length > SNIPPET ? `${text.slice(0, SNIPPET - 1)}…` : text;
  }
  return '';
}

// The tree of `children` (sessions) as HTML; `store` gives their own children and messages.
export function subAgentTreeHtml(children, store, esc, depth = 0) {
  if (!children.length) return '';
  const items = children.map((child) => {
    const messages = store.sessionMessages(child.id);
    const state = subAgentState(child, messages);
    const words = lastWords(messages, store.state.streams);
    const grand = store.childSessions(child.id);
    const nested = grand.length && depth + 1 < MAX_DEPTH
      ? subAgentTreeHtml(grand, store, esc, depth + 1)
      : grand.length ? `<div class="muted">${esc(tn('sa.more', grand.length))}</div>` : '';
    const title = child.title || t('sa.title');
    return `<li class="sa" part="sub-agent" data-session="${esc(child.id)}" data-state="${state}">`
      + `<div class="row"><span class="sa-icon" aria-hidden="true">↳</span><span class="grow sa-title">${esc(title)}</span>`
      + `<span class="status ${state === 'working' ? 'running' : state === 'done' ? 'done' : 'failed'}">${esc(t(`sa.${state}`))}</span>`
      + `<button type="button" class="sa-open" data-open-session="${esc(child.id)}" aria-label="${esc(t('sa.openLabel', { title }))}">${esc(t('sa.open'))}</button></div>`
      + (words ? `<div class="muted sa-words">${esc(words)}</div>` : '')
      + nested + '</li>';
  });
  const label = t(depth ? 'sa.nested' : 'sa.top');
  return `<ul class="subagents" part="sub-agents" aria-label="${esc(label)}">${items.join('')}</ul>`;
}
