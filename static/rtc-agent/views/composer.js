// <rtc-composer>: the message box (Enter sends, Shift+Enter breaks the line), Stop while the
// session works, and a failed send with Retry (the same client_id, so never a duplicate).
// Attachments: the paperclip (a file picker), paste, and drag-and-drop onto the composer (a drop
// zone shows while files are dragged over it) add files to the upload queue (lib/uploads.js);
// each is a chip with its size, a thumbnail for images, a progress bar, × (cancel and remove)
// and, after a failure, Retry. Send waits until every upload has finished.
// A message starting with a command (`/goal …`, `/loop …`, `/compact`; lib/commands.js) is run
// instead of sent (lib/tasks.js): a hint lists the commands while one is typed, and the answer
// shows above the box (what was typed stays when it is refused). A sub-agent's conversation is
// read-only: no box, a note instead. The phone button starts a voice call in this conversation
// (or a new one): lib/voice.js, shown by views/call-panel.js; it waits while a call is on.
import { View, esc } from './base.js';
import { t } from '../lib/i18n.js';
import { commandHints, parseCommand } from '../lib/commands.js';
import { formatSize } from '../lib/filetypes.js';
import { documentIcon, imageIcon, paperclip, phoneIcon } from './icons.js';

const ACCEPT = ['image/jpeg', 'image/png', 'image/bmp', 'image/tiff', 'image/svg+xml', 'image/webp', 'image/gif',
  'text/*', 'application/json', 'application/xml', 'application/yaml', '.md', '.csv', '.json', '.xml', '.yaml',
  '.yml', '.toml', '.js', '.ts', '.py', '.go', '.rs', '.java', '.c', '.h', '.cpp', '.sh', '.sql', '.log'].join(',');

const hasFiles = (e) => !!e.dataTransfer && [...(e.dataTransfer.types || [])].includes('Files');

class Composer extends View {
  static styles = View.css(`
    :host { display: block; border-top: 1px solid var(--rtc-color-border, #e3e6ee); padding: 8px; position: relative; }
    textarea { width: 100%; resize: none; height: 56px; }
    .failed { color: var(--rtc-color-danger, #9b2a20); font-size: 12px; margin-bottom: 4px; }
    .notice { background: var(--rtc-color-danger-bg, #fdf1f0); color: var(--rtc-color-danger, #9b2a20); font-size: 12px; padding: 4px 8px; border-radius: 6px; margin-bottom: 6px; white-space: pre-line; display: flex; gap: 6px; align-items: flex-start; }
    .notice span { flex: 1; }
    .notice button { padding: 0 6px; }
    .clip { padding: 3px 6px; line-height: 0; color: var(--rtc-color-text-2, #4a5266); }
    .side { display: flex; flex-direction: column; gap: 4px; }
    ul.chips { list-style: none; margin: 0 0 6px; padding: 0; display: flex; flex-wrap: wrap; gap: 6px; }
    .chip { display: grid; grid-template-columns: auto 1fr auto; gap: 2px 6px; align-items: center; border: 1px solid var(--rtc-color-border-strong, #d6dbe6);
      border-radius: 8px; padding: 4px 6px; width: 250px; background: var(--rtc-color-surface-2, #fafbfd); font-size: 12px; }
    .chip[data-status="failed"] { border-color: #f0b8b2; background: var(--rtc-color-danger-bg, #fdf1f0); }
    .chip .thumb { width: 36px; height: 36px; object-fit: cover; border-radius: 4px; grid-row: span 2; }
    .chip .icon { width: 36px; height: 36px; display: flex; align-items: center; justify-content: center; background: var(--rtc-color-surface-3, #eef0f5); color: var(--rtc-color-muted, #687087); border-radius: 4px; grid-row: span 2; }
    .chip .name { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; font-weight: 600; }
    .chip .acts { grid-row: span 2; display: flex; gap: 4px; }
    .chip .acts button { padding: 0 6px; }
    .chip .line { display: flex; gap: 6px; align-items: center; min-width: 0; white-space: nowrap; }
    .chip progress { flex: 1; min-width: 40px; height: 8px; }
    .chip .err { grid-column: 1 / -1; color: var(--rtc-color-danger, #9b2a20); overflow-wrap: anywhere; }
    .cmd { font-size: 12px; padding: 4px 8px; border-radius: 6px; margin-bottom: 6px; display: flex; gap: 6px; align-items: flex-start; background: var(--rtc-color-selected, #eef3fd); color: #1d3a8a; }
    .cmd[data-kind="error"] { background: var(--rtc-color-danger-bg, #fdf1f0); color: var(--rtc-color-danger, #9b2a20); }
    .cmd span { flex: 1; overflow-wrap: anywhere; } .cmd button { padding: 0 6px; }
    .hint { font-size: 12px; color: var(--rtc-color-text-2, #4a5266); margin-bottom: 4px; } .hint code { font-size: 12px; }
    .readonly { font-size: 12.5px; color: #4b3a7a; background: #f4f1fb; border-radius: 6px; padding: 6px 8px; }
    .drop { position: absolute; inset: 2px; border: 2px dashed var(--rtc-color-accent, #2952cc); border-radius: 10px; background: rgba(230, 236, 251, .92);
      color: var(--rtc-color-accent, #2952cc); font-weight: 600; display: flex; align-items: center; justify-content: center; pointer-events: none; z-index: 1; }
  `);

  constructor() {
    super();
    this.root.innerHTML = `<div class="drop" part="drop-zone" aria-hidden="true" hidden data-i18n="composer.drop">Drop files to attach them</div>
      <div class="notice" role="alert" hidden><span></span><button type="button" data-act="dismiss" aria-label="Dismiss the message" data-i18n-aria-label="composer.dismiss">×</button></div>
      <div class="failed" hidden></div>
      <div class="cmd" part="command-notice" role="status" hidden><span></span><button type="button" data-act="cmd-dismiss" aria-label="Dismiss" data-i18n-aria-label="composer.dismissShort">×</button></div>
      <div class="hint" part="command-hint" hidden></div>
      <div class="readonly" part="read-only" hidden data-i18n="composer.readOnly">A sub-agent's conversation: it is read-only. Its parent's conversation talks to it.</div>
      <ul class="chips" part="attachments" aria-label="Attachments" data-i18n-aria-label="composer.attachments" hidden></ul>
      <div class="row inputrow"><div class="side"><button type="button" class="clip" data-act="attach" aria-label="Attach files" title="Attach files (images and text files)" data-i18n-aria-label="composer.attach">${paperclip}</button>
      <button type="button" class="clip" part="call-button" data-act="call" aria-label="Start a voice call" data-i18n-aria-label="composer.call" data-i18n-title="composer.callTitle">${phoneIcon}</button></div>
      <input type="file" multiple hidden accept="${ACCEPT}">
      <textarea class="grow" part="input" placeholder="Message the agent…" aria-label="Message" data-i18n-placeholder="composer.placeholder" data-i18n-aria-label="composer.message"></textarea>
      <div><button class="primary" data-act="send" data-i18n="composer.send">Send</button><br><button data-act="stop" hidden data-i18n="composer.stop">Stop</button></div></div>`;
    this.input = this.root.querySelector('textarea');
    this.picker = this.root.querySelector('input[type=file]');
    this.chips = new Map(); // upload id -> {node, sig}
    this.dragDepth = 0;
    this.input.addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); this.submit(); } });
    this.input.addEventListener('paste', (e) => this.onPaste(e));
    this.input.addEventListener('input', () => this.showHint());
    this.root.querySelector('[data-act=cmd-dismiss]').onclick = () => this.agent.tasks.notice('');
    this.root.querySelector('[data-act=send]').onclick = () => this.submit();
    this.root.querySelector('[data-act=stop]').onclick = () => this.agent.stop(this.agent.store.state.currentSession);
    this.root.querySelector('[data-act=attach]').onclick = () => this.picker.click();
    this.root.querySelector('[data-act=call]').onclick = () => this.agent.voice.start().catch((err) => this.agent.fail(err));
    this.root.querySelector('[data-act=dismiss]').onclick = () => this.agent.uploads.notice('');
    this.picker.onchange = () => { this.attach([...this.picker.files]); this.picker.value = ''; };
    this.root.querySelector('ul.chips').addEventListener('click', (e) => {
      const btn = e.target.closest('button[data-act]');
      const id = btn && btn.closest('li').dataset.id;
      if (!id) return;
      if (btn.dataset.act === 'remove') { this.agent.uploads.remove(id); this.input.focus(); }
      else if (btn.dataset.act === 'retry') this.agent.uploads.retry(id);
    });
    // On the element itself: drags over any part of the composer, and events dispatched at it.
    this.addEventListener('dragenter', (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      this.dragDepth++;
      this.showDrop(true);
    });
    this.addEventListener('dragover', (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = 'copy';
      this.showDrop(true);
    });
    this.addEventListener('dragleave', (e) => {
      if (!hasFiles(e)) return;
      this.dragDepth = Math.max(0, this.dragDepth - 1);
      if (!this.dragDepth) this.showDrop(false);
    });
    this.addEventListener('drop', (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      this.dragDepth = 0;
      this.showDrop(false);
      this.attach([...e.dataTransfer.files]);
    });
  }

  showDrop(on) { this.root.querySelector('.drop').hidden = !on; }

  attach(files) {
    if (!files.length || !this.agent) return;
    this.agent.uploads.add(files);
  }

  // Pasted files (a screenshot, files copied in a file manager) are attached; text pastes as usual.
  onPaste(e) {
    const files = [...((e.clipboardData && e.clipboardData.files) || [])];
    if (!files.length) return;
    if (![...e.clipboardData.types].includes('text/plain')) e.preventDefault();
    this.attach(files);
  }

  // While a command is typed: the commands it may become, with their usage.
  showHint() {
    const hints = this.root.querySelector('.inputrow').hidden ? [] : commandHints(this.input.value);
    const hint = this.root.querySelector('.hint');
    hint.hidden = !hints.length;
    hint.innerHTML = hints.map((c) => `<div><code>${esc(c.usage)}</code> ${esc(c.help)}</div>`).join('');
  }

  async runCommand(text) {
    if (this.running) return;
    this.running = true;
    this.root.querySelector('[data-act=send]').disabled = true;
    try {
      const taken = await this.agent.tasks.command(text);
      if (taken && this.input.value.trim() === text) this.input.value = '';
    } finally {
      this.running = false;
      this.showHint();
      this.update(this.agent.store.state);
    }
  }

  submit() {
    const typed = this.input.value.trim();
    if (parseCommand(typed)) { this.runCommand(typed); return; } // attachments wait for a message
    if (this.agent.store.state.commandNotice) this.agent.tasks.notice('');
    const uploads = this.agent.uploads;
    if (uploads.busy) { uploads.notice(t('upload.busyNotice')); return; }
    if (uploads.failed) { uploads.notice(t('upload.failedNotice')); return; }
    const text = this.input.value.trim();
    if (!text && !uploads.items.length) return;
    if (this.checking) return;
    // The page may cancel (what was typed and attached stays) or rewrite the message first.
    this.checking = true;
    this.agent.checkSend(text).then((content) => {
      this.checking = false;
      if (content === null) { uploads.notice(t('composer.cancelled')); return; }
      if (this.input.value.trim() !== text) return; // typed on meanwhile: the user sends again
      const files = uploads.take();
      this.input.value = '';
      this.agent.send(content, null, files, { checked: true });
    }, (err) => { this.checking = false; this.agent.fail(err); });
  }

  update(state) {
    const session = state.sessions[state.currentSession];
    const readOnly = !!(session && session.parent_server_session_id);
    this.root.querySelector('.inputrow').hidden = readOnly;
    this.root.querySelector('.readonly').hidden = !readOnly;
    if (readOnly) this.root.querySelector('.hint').hidden = true;
    this.root.querySelector('[data-act=stop]').hidden = !(session && session.status === 'active');
    const cmd = this.root.querySelector('.cmd');
    const said = state.commandNotice;
    cmd.hidden = !said;
    cmd.dataset.kind = said ? said.kind : '';
    cmd.querySelector('span').textContent = said ? said.text : '';
    const failed = this.root.querySelector('.failed');
    const sending = state.sending;
    failed.hidden = !(sending && sending.failed);
    if (sending && sending.failed) {
      failed.innerHTML = `Not sent: ${esc(sending.error || '')} <button data-act="retry">Retry</button>`;
      failed.querySelector('button').onclick = () => this.agent.retrySend();
    }
    const notice = this.root.querySelector('.notice');
    notice.hidden = !state.uploadNotice;
    notice.querySelector('span').textContent = state.uploadNotice || '';
    this.renderChips(state.uploads || []);
    const uploads = this.agent.uploads;
    const send = this.root.querySelector('[data-act=send]');
    send.disabled = uploads.busy || uploads.failed || !!this.running;
    send.title = t(uploads.busy ? 'send.waiting' : uploads.failed ? 'send.failed' : 'send.title');
    const call = this.root.querySelector('[data-act=call]');
    const onCall = this.agent.voice.active || (state.call && state.call.status === 'ending');
    call.disabled = onCall;
    call.title = t(onCall ? 'composer.callOn' : 'composer.callTitle');
  }

  // Chips are keyed by upload id and rebuilt only when their status changes; progress updates
  // only move the bar, so a focused × or Retry keeps its focus while bytes go out.
  renderChips(items) {
    const list = this.root.querySelector('ul.chips');
    list.hidden = !items.length;
    const keep = new Set(items.map((u) => u.id));
    for (const [id, entry] of this.chips) if (!keep.has(id)) { entry.node.remove(); this.chips.delete(id); }
    let prev = null;
    for (const u of items) {
      let entry = this.chips.get(u.id);
      const sig = [u.status, u.error, u.previewUrl].join('|');
      if (!entry || entry.sig !== sig) {
        const node = document.createElement('li');
        node.className = 'chip';
        node.dataset.id = u.id;
        node.dataset.status = u.status;
        node.innerHTML = this.chipHtml(u);
        const focused = entry && this.root.activeElement && entry.node.contains(this.root.activeElement)
          ? this.root.activeElement.dataset.act : null;
        if (entry) entry.node.replaceWith(node);
        entry = { node, sig };
        this.chips.set(u.id, entry);
        const again = focused && (node.querySelector(`[data-act=${focused}]`) || node.querySelector('[data-act=remove]'));
        if (again) again.focus();
      }
      const bar = entry.node.querySelector('progress');
      if (bar) { bar.value = u.loaded; entry.node.querySelector('.pct').textContent = `${Math.floor((100 * u.loaded) / (u.size || 1))}%`; }
      const expected = prev ? prev.nextSibling : list.firstChild;
      if (expected !== entry.node) list.insertBefore(entry.node, expected);
      prev = entry.node;
    }
  }

  chipHtml(u) {
    const name = esc(u.name);
    const thumb = u.previewUrl ? `<img class="thumb" src="${esc(u.previewUrl)}" alt="">`
      : `<span class="icon">${u.kind === 'image' ? imageIcon : documentIcon}</span>`;
    const working = u.status === 'preparing' || u.status === 'uploading' || u.status === 'waiting';
    const state = u.status === 'done' ? '<span class="muted">uploaded</span>' : '';
    const err = u.error ? `<span class="err" role="status">${esc(u.error)}</span>` : '';
    const bar = working ? `<progress max="${u.size}" value="${u.loaded}" aria-label="${esc(t('upload.uploading', { name: u.name }))}"></progress><span class="pct muted"></span>` : '';
    const retry = u.status === 'failed' ? `<button type="button" data-act="retry" aria-label="${esc(t('upload.retryLabel', { name: u.name }))}" title="${esc(t('upload.retry'))}">${esc(t('upload.retry'))}</button>` : '';
    const remove = `<button type="button" data-act="remove" aria-label="${esc(t(working ? 'upload.cancelRemove' : 'upload.removeLabel', { name: u.name }))}" title="${esc(t(working ? 'upload.cancel' : 'upload.remove'))}">×</button>`;
    return `${thumb}<span class="name" title="${name}">${name}</span><span class="acts">${retry}${remove}</span>
      <span class="line"><span class="muted">${esc(formatSize(u.size))}</span>${bar}${state}</span>${err}`;
  }
}

customElements.define('rtc-composer', Composer);
