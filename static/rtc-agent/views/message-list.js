// <rtc-message-list>: the open session's conversation. Messages are keyed by id and a node is
// replaced only when its rendered HTML changed, so prompts keep what the user typed. Streaming
// text comes from the live chunks until the final topic message replaces it. Model text is
// rendered through lib/markdown.js (sanitised); everything else is escaped.
// A user message's attachments show under it: the server's thumbnail once its `file` entity
// arrived (fetched with the token, shown through a blob: URL, revoked when off screen), the
// local preview of an image until then, and the server's warning (a file skipped or cut short).
// A compaction is a mark before the first message it kept, with its summary (views/compaction.js).
// The sub-agents a message started are drawn under it as a tree (views/subagent-tree.js); a user
// message a goal or a loop sent says so. A sub-agent's own conversation is read-only.
import { View, esc } from './base.js';
import { t } from '../lib/i18n.js';
import { renderMarkdown } from '../lib/markdown.js';
import { formatSize } from '../lib/filetypes.js';
import { documentIcon, imageIcon } from './icons.js';
import { placeSummaries, summaryHtml } from './compaction.js';
import { subAgentTreeHtml } from './subagent-tree.js';
import './prompts.js';

// Server tools whose call the turn waits on (their output arrives when the awaited thing ends).
const WAITING_SERVER_TOOLS = new Set(['subAgent']);

const STATUS = { pending: 'pending', sent: 'pending', executing: 'running', completed: 'done', failed: 'failed', timeout: 'timed out', rejected: 'rejected' };

class MessageList extends View {
  static styles = View.css(`
    :host { display: block; overflow: auto; padding: 10px 12px; }
    .msg { margin: 0 0 10px; }
    .user { background: var(--rtc-color-accent, #2952cc); color: var(--rtc-color-on-accent, #fff); padding: 6px 10px; border-radius: 10px; margin-left: 20%; white-space: pre-wrap; }
    .user .fork { float: right; font-size: 11px; padding: 0 5px; margin-left: 6px; }
    .md > :first-child { margin-top: 0; } .md > :last-child { margin-bottom: 0; }
    .copy { position: absolute; top: 4px; right: 4px; font-size: 11px; padding: 0 6px; }
    details.thinking { color: var(--rtc-color-muted, #687087); font-size: 13px; }
    .tool { border: 1px solid var(--rtc-color-border, #e3e6ee); border-radius: 8px; padding: 6px 8px; font-size: 13px; }
    .tool .name { font-weight: 600; font-family: ui-monospace, monospace; }
    .status { font-size: 11px; border-radius: 10px; padding: 1px 7px; background: var(--rtc-color-surface-3, #eef0f5); }
    .status.done { background: #e2f4e6; color: #1e6b32; } .status.failed, .status.rejected, .status.timed { background: #fbe4e2; color: var(--rtc-color-danger, #9b2a20); }
    .status.running::before { content: ''; display: inline-block; width: 8px; height: 8px; margin-right: 4px; border: 2px solid var(--rtc-color-accent, #2952cc); border-right-color: transparent; border-radius: 50%; animation: spin .8s linear infinite; }
    @keyframes spin { to { transform: rotate(360deg); } }
    .error { border: 1px solid #f0b8b2; background: var(--rtc-color-danger-bg, #fdf1f0); border-radius: 8px; padding: 8px; }
    .md table { border-collapse: collapse; } .md th, .md td { border: 1px solid var(--rtc-color-border, #e3e6ee); padding: 2px 8px; }
    .empty { color: var(--rtc-color-muted, #687087); text-align: center; margin-top: 30%; }
    .compaction { display: flex; align-items: center; gap: 8px; color: var(--rtc-color-warning, #7a5a00); font-size: 12px; margin: 14px 0 4px; }
    .compaction::before, .compaction::after { content: ''; flex: 1; border-top: 2px dashed #e0c77a; }
    details.summary { border: 1px solid #eadfb8; background: var(--rtc-color-surface, #fff)bef; border-radius: 8px; padding: 4px 10px; font-size: 13px; }
    details.summary > summary { cursor: pointer; color: var(--rtc-color-warning, #5c4500); }
    details.summary[open] > summary { margin-bottom: 6px; }
    details.summary .md :is(h1, h2, h3, h4) { font-size: 13.5px; margin: 10px 0 3px; }
    details.summary .files-back { margin-top: 8px; }
    details.file > summary { font-family: ui-monospace, monospace; font-size: 12px; cursor: pointer; }
    details.file pre { max-height: 200px; margin: 4px 0; }
    .out { white-space: pre-wrap; max-height: 160px; overflow: auto; font-family: ui-monospace, monospace; font-size: 12px; }
    ul.files { list-style: none; margin: 4px 0 0 20%; padding: 0; display: flex; flex-wrap: wrap; gap: 6px; justify-content: flex-end; }
    .att { display: flex; gap: 6px; align-items: center; border: 1px solid var(--rtc-color-border-strong, #d6dbe6); border-radius: 8px; padding: 3px 6px; font-size: 12px; max-width: 240px; background: var(--rtc-color-surface-2, #fafbfd); }
    .att img { width: 48px; height: 48px; object-fit: cover; border-radius: 4px; }
    .att .icon { width: 32px; height: 32px; display: flex; align-items: center; justify-content: center; background: var(--rtc-color-surface-3, #eef0f5); color: var(--rtc-color-muted, #687087); border-radius: 4px; }
    .att .name { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; display: block; }
    .att[data-status="skipped"] { border-color: #f0b8b2; background: var(--rtc-color-danger-bg, #fdf1f0); }
    .warn { margin: 4px 0 0 20%; color: #8a4b00; background: var(--rtc-color-surface, #fff)3d6; border-radius: 6px; padding: 3px 8px; font-size: 12px; }
    .origin { margin-left: 20%; text-align: right; font-size: 11px; color: var(--rtc-color-muted, #687087); }
    ul.subagents { list-style: none; margin: 4px 0 0; padding: 0 0 0 14px; border-left: 2px solid #d9d2f0; }
    ul.subagents ul.subagents { margin-left: 8px; }
    li.sa { margin: 4px 0; padding: 4px 8px; border: 1px solid #e3def3; border-radius: 8px; background: var(--rtc-color-surface-2, #fbfaff); font-size: 13px; }
    li.sa .sa-title { font-weight: 600; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
    li.sa .sa-open { font-size: 11px; padding: 0 7px; }
    li.sa .sa-words { overflow-wrap: anywhere; }
    .subagents-rest > .muted { font-size: 12px; }
  `);

  constructor() {
    super();
    this.nodes = new Map();
    this.md = new Map();
    this.thumbs = new Map(); // file entity id -> {url} once fetched ('' while loading or failed)
    this.shownThumbs = new Set();
    this.root.addEventListener('click', (e) => this.onClick(e));
  }

  markdown(id, text) {
    const hit = this.md.get(id);
    if (hit && hit.text === text) return hit.html;
    const html = renderMarkdown(text).replace(/<pre>/g, `<pre><button class="copy" type="button">${esc(t('msg.copy'))}</button>`);
    this.md.set(id, { text, html });
    return html;
  }

  update(state) {
    const sid = state.currentSession;
    const store = this.agent.store;
    const items = sid ? placeSummaries(store.sessionMessages(sid)) : [];
    // A tool call id is unique within a turn only (many models number them call_0, call_1 ...
    // in every answer): an RTC is found by its toolcall_input message, else by turn + id.
    const rtcs = new Map();
    for (const r of sid ? store.sessionRtcs(sid) : []) {
      if (r.message_id) rtcs.set(r.message_id, r);
      rtcs.set(`${r.turn_id}/${r.tool_call_id}`, r);
    }
    // Server tools (memory, ...) have no RTC: their call ends with a toolcall_output message.
    const outputs = new Map();
    for (const m of items) if (m.parent_message_id && m.content && m.content.type === 'toolcall_output') outputs.set(m.parent_message_id, m);
    const session = sid ? state.sessions[sid] : null;
    state = { ...state, outputs, sessionActive: !!(session && session.status === 'active'), readOnly: !!(session && session.parent_server_session_id) };
    // Sub-agents, by the message that started them; those whose message is not shown go last.
    const children = new Map();
    for (const child of sid ? store.childSessions(sid) : []) {
      const key = child.sub_agent_parent_message_id || '';
      if (!children.has(key)) children.set(key, []);
      children.get(key).push(child);
    }
    const atBottom = this.scrollHeight - this.scrollTop - this.clientHeight < 40;
    this.shownThumbs = new Set();
    const wanted = [];
    for (const m of items) {
      const mine = children.get(m.id);
      children.delete(m.id);
      const html = this.renderMessage(m, state, rtcs) + (mine ? subAgentTreeHtml(mine, store, esc) : '');
      if (html) wanted.push([m.id, html]);
    }
    const rest = [...children.values()].flat();
    if (rest.length) wanted.push(['subagents-rest', `<div class="subagents-rest"><div class="muted">${esc(t('msg.subAgents'))}</div>${subAgentTreeHtml(rest, store, esc)}</div>`]);
    if (!wanted.length) wanted.push(['empty', `<div class="empty">${esc(t(sid ? 'msg.loading' : 'msg.empty'))}</div>`]);
    const keep = new Set(wanted.map(([id]) => id));
    for (const [id, n] of this.nodes) if (!keep.has(id)) { n.node.remove(); this.nodes.delete(id); }
    let prev = null;
    for (const [id, html] of wanted) {
      let entry = this.nodes.get(id);
      if (!entry || entry.html !== html) {
        const node = document.createElement('div');
        node.className = 'msg';
        node.dataset.id = id;
        node.innerHTML = html;
        if (entry) entry.node.replaceWith(node);
        entry = { node, html };
        this.nodes.set(id, entry);
        for (const p of node.querySelectorAll('rtc-approval, rtc-ask-user')) { p.agent = this.agent; }
      }
      const expected = prev ? prev.nextSibling : this.root.firstChild;
      if (expected !== entry.node) this.root.insertBefore(entry.node, expected);
      prev = entry.node;
    }
    if (atBottom) this.scrollTop = this.scrollHeight;
    this.dropThumbs(this.shownThumbs);
  }

  disconnectedCallback() { super.disconnectedCallback(); this.dropThumbs(new Set()); }

  // Revoke the blob: URLs of thumbnails no longer on screen (fetched again when they return).
  dropThumbs(keep) {
    for (const [id, t] of this.thumbs) {
      if (keep.has(id) || t.loading) continue;
      if (t.url) URL.revokeObjectURL(t.url);
      this.thumbs.delete(id);
    }
  }

  // The blob: URL of a file entity's thumbnail, or '' while it loads (a re-render follows).
  thumb(entity) {
    this.shownThumbs.add(entity.id);
    const hit = this.thumbs.get(entity.id);
    if (hit) return hit.url;
    const t = { url: '', loading: true };
    this.thumbs.set(entity.id, t);
    this.agent.fetchBlob(entity.thumbnail_url).then((blob) => {
      t.url = URL.createObjectURL(blob);
      const previews = this.agent.store.state.previews;
      if (previews[entity.fileid]) { URL.revokeObjectURL(previews[entity.fileid]); delete previews[entity.fileid]; }
    }).catch((err) => console.warn('rtc-agent: thumbnail', entity.id, err.message))
      .finally(() => { t.loading = false; this.agent.store.changed(); });
    return '';
  }

  renderFiles(m, files, state) {
    const entities = this.agent.store.messageFiles(m.id);
    const chips = [];
    const warnings = [];
    for (const f of files) {
      if (!f || typeof f.fileid !== 'string') continue;
      const e = entities[f.fileid];
      const extra = (f.extra && typeof f.extra === 'object') ? f.extra : {};
      const name = (e && e.name) || extra.name || f.fileid.split('/').pop();
      const size = e ? e.size : extra.size;
      const image = e ? e.kind === 'image' : String(f.mimetype || '').startsWith('image/');
      const src = (e && e.status === 'ready' && e.thumbnail_url && this.thumb(e)) || state.previews[f.fileid] || '';
      const pic = src ? `<img src="${esc(src)}" alt="${esc(name)}">` : `<span class="icon">${image ? imageIcon : documentIcon}</span>`;
      const status = e ? e.status : 'processing';
      const dims = e && e.width && e.height ? ` · ${e.width}×${e.height}` : '';
      chips.push(`<li class="att" part="attachment" data-fileid="${esc(f.fileid)}" data-status="${esc(status)}">${pic}<span style="min-width:0">`
        + `<span class="name" title="${esc(name)}">${esc(name)}</span><span class="muted">${typeof size === 'number' ? esc(formatSize(size)) : ''}${esc(dims)}</span></span></li>`);
      if (e && e.warning) warnings.push(`<div class="warn" part="attachment-warning">⚠ ${esc(name)}: ${esc(e.warning)}</div>`);
    }
    return chips.length ? `<ul class="files" aria-label="Attachments">${chips.join('')}</ul>${warnings.join('')}` : '';
  }

  renderMessage(m, state, rtcs) {
    const { type, data } = m.content || {};
    const stream = state.streams[m.id];
    const live = m.streaming_status === 'streaming' && stream ? stream.text : null;
    switch (type) {
      case 'user_message': {
        const files = data && Array.isArray(data.files) ? this.renderFiles(m, data.files, state) : '';
        const fork = state.readOnly ? '' : `<button class="fork" data-fork="${esc(m.id)}" title="${esc(t('msg.forkTitle'))}">${esc(t('msg.fork'))}</button>`;
        return `${originHtml(data)}<div class="user">${fork}${esc((data && data.text) || '')}</div>${files}`;
      }
      case 'summary': return summaryHtml(m, (text) => this.markdown(m.id, text), esc);
      case 'markdown':
      case 'text': {
        const text = live ?? (typeof data === 'string' ? data : (data && data.text) || '');
        if (!text && m.streaming_status !== 'streaming') return '';
        return `<div class="md" part="answer">${this.markdown(m.id, text)}${m.streaming_status === 'streaming' ? '<span class="muted"> ▍</span>' : ''}</div>`;
      }
      case 'thinking': {
        const text = live ?? (data || '');
        return text ? `<details class="thinking"><summary>${esc(t('msg.thinking'))}</summary><div>${esc(text)}</div></details>` : '';
      }
      case 'toolcall_input': return this.renderTool({ ...(data || {}), msgId: m.id }, rtcs.get(m.id) || rtcs.get(`${m.turn_id}/${data && data.id}`), state);
      case 'toolcall_output':
        return `<details class="muted"><summary>${esc(t('msg.resultOf', { tool: data.tool_name || 'tool' }))}</summary><div class="out">${esc(data.output)}</div></details>`;
      case 'error':
        return `<div class="error" part="error" role="alert"><div class="row"><b class="grow">${esc(data.title || t('msg.error'))}</b><span class="status failed">${esc(data.category || 'system')}</span></div>
          <div>${esc(data.message || '')}</div><div style="margin-top:6px"><button data-retry="${esc(m.session_id)}">${esc(t('msg.retry'))}</button></div></div>`;
      default: return '';
    }
  }

  renderTool(call, rtc, state) {
    const prompt = rtc && state.prompts && state.prompts[rtc.id];
    const local = rtc && state.local && state.local[rtc.id];
    const queued = rtc && (state.outbox || []).some((o) => o.rtc_id === rtc.id);
    const output = !rtc && call.msgId && state.outputs.get(call.msgId);
    let status = rtc ? STATUS[rtc.status] || rtc.status : 'pending';
    // A server tool's refusal is stored as a finished call whose output says "[Tool Error]".
    const out = output && (output.content.data || {});
    if (out) status = out.status === 'error' || String(out.output || '').startsWith('[Tool Error]') ? 'failed' : 'done';
    if (local && local.running && rtc.status !== 'completed' && rtc.status !== 'failed') status = 'running';
    // A server tool the turn waits on (a sync sub-agent) runs until its output arrives.
    if (!rtc && !out && state.sessionActive && WAITING_SERVER_TOOLS.has(call.tool_name)) status = 'running';
    const owner = rtc && this.agent.executor.owns(rtc.session_id);
    const args = String(call.input || '');  // the raw JSON text of the model's arguments
    const terminal = rtc && ['completed', 'failed', 'timeout', 'rejected'].includes(rtc.status);
    let extra = '';
    if (prompt && !terminal) {
      extra = prompt.kind === 'approval'
        ? `<rtc-approval data-rtc="${esc(rtc.id)}"></rtc-approval>`
        : `<rtc-ask-user data-rtc="${esc(rtc.id)}"></rtc-ask-user>`;
    }
    const note = queued ? '<span class="muted">delivering result…</span>'
      : rtc && !owner && !terminal ? '<span class="muted">runs on another device</span>' : '';
    const err = rtc && rtc.error_message ? `<div class="muted">${esc(rtc.error_message)}</div>` : '';
    return `<div class="tool" part="tool" data-tool="${esc(call.tool_name)}" data-status="${esc(status)}">
      <div class="row"><span class="name">${esc(call.tool_name)}</span><span class="grow muted" style="overflow:hidden;text-overflow:ellipsis;white-space:nowrap">${esc(args.slice(0, 120))}</span>
      <span class="status ${esc(status.split(' ')[0])}">${esc(prompt && !terminal && prompt.kind === 'approval' ? 'awaiting approval' : status)}</span></div>${note}${err}${extra}</div>`;
  }

  onClick(e) {
    const copy = e.target.closest('button.copy');
    if (copy) {
      const code = copy.parentElement.querySelector('code') || copy.parentElement;
      navigator.clipboard.writeText(code.textContent).then(() => { copy.textContent = t('msg.copied'); }, () => { copy.textContent = t('msg.copyFailed'); });
      return;
    }
    const open = e.target.closest('[data-open-session]');
    if (open) return this.agent.selectSession(open.dataset.openSession);
    const retry = e.target.closest('[data-retry]');
    if (retry) return this.agent.retryTurn(retry.dataset.retry);
    const fork = e.target.closest('[data-fork]');
    if (fork) {
      const msg = this.agent.store.state.messages[fork.dataset.fork];
      const text = prompt('Edit the message; a new session is forked from here', msg.content.data.text || '');
      if (text) this.agent.fork(msg.session_id, msg.id, text);
    }
  }
}

// Who sent a user message the user did not type: a goal's round, a loop's run, or a voice call
// (`content.data.origin`, written by the server).
function originHtml(data) {
  const origin = data && data.origin;
  if (!origin || typeof origin !== 'object') return '';
  if (origin.kind === 'goal') {
    const round = Number(origin.round) || 0;
    return `<div class="origin" part="message-origin">${esc(round ? t('origin.goalRound', { round: round + 1 }) : t('origin.goalSet'))}</div>`;
  }
  if (origin.kind === 'loop') {
    const tick = Number(origin.tick);
    return `<div class="origin" part="message-origin">${esc(Number.isFinite(tick) ? t('origin.loopTick', { tick: tick + 1 }) : t('origin.loop'))}</div>`;
  }
  // live: what was said on a voice call (in the call's own session: it names the channel), or
  // the call handed back to the agent that created it.
  if (origin.kind === 'live') return `<div class="origin" part="message-origin">${esc(t(origin.channel ? 'origin.liveInput' : 'origin.live'))}</div>`;
  return '';
}

customElements.define('rtc-message-list', MessageList);
