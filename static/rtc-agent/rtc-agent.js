// <rtc-agent server="https://agent.example.com">: the embeddable widget. The host sets
// `element.getToken = async ({deviceId}) => accessJwt`; the widget connects once it has both.
// A floating bubble opens a panel (normal, maximised or minimised) with the session list, the
// conversation (under the context bar: the ring and the session's memories), the composer and
// the file panel; "Memories" swaps the conversation for the memories page. Above the
// conversation, the task panel shows the session's goal, todo list and loops.
// `window.rtcAgent.registerFunction(...)` lets the page offer its own functions.
// The page shapes the agent with `agent-prompt="…"` (or the `agentPrompt` property): sent, with
// the VFS's /AGENT.md, when a message creates a session (lib/agent-prompt.js).
import { Agent, WORK_MODES } from './lib/agent.js';
import { registerFunction } from './lib/functions.js';
import { View, esc } from './views/base.js';
import './views/session-list.js';
import './views/message-list.js';
import './views/composer.js';
import './views/file-panel.js';
import './views/context-bar.js';
import './views/memory-page.js';
import './views/task-panel.js';

window.rtcAgent = Object.assign(window.rtcAgent || {}, { registerFunction });

class RtcAgent extends View {
  static styles = View.css(`
    :host { position: fixed; right: 20px; bottom: 20px; z-index: 2147483000; }
    .bubble { width: 56px; height: 56px; border-radius: 50%; background: #2952cc; color: #fff; border: 0; font-size: 24px; box-shadow: 0 4px 14px rgba(0,0,0,.25); }
    .panel { position: fixed; right: 20px; bottom: 88px; width: min(760px, calc(100vw - 40px)); height: min(620px, calc(100vh - 110px));
      background: #fff; border-radius: 12px; box-shadow: 0 10px 40px rgba(0,0,0,.25); display: flex; flex-direction: column; overflow: hidden; }
    .panel.maximised { inset: 12px; width: auto; height: auto; }
    .panel.minimised { height: 46px; }
    .panel.minimised .body { display: none; }
    header { display: flex; gap: 8px; align-items: center; padding: 8px 10px; border-bottom: 1px solid #e3e6ee; }
    header b { flex: 1; }
    header button { padding: 1px 7px; }
    .conn { font-size: 12px; padding: 1px 8px; border-radius: 10px; background: #fbe4e2; color: #9b2a20; }
    .conn[data-state="connected"] { background: #e2f4e6; color: #1e6b32; }
    .conn[data-state="connecting"] { background: #fff3d6; color: #7a5a00; }
    .body { flex: 1; display: grid; grid-template-columns: 190px 1fr; min-height: 0; }
    .body.files { grid-template-columns: 190px 1fr 240px; }
    .page { flex: 1; display: flex; min-height: 0; }
    header button[aria-pressed="true"] { background: #e6ecfb; border-color: #9fb3ec; }
    .chat { display: flex; flex-direction: column; min-height: 0; min-width: 0; }
    rtc-message-list { flex: 1; }
    .err { background: #fdf1f0; color: #9b2a20; font-size: 12px; padding: 3px 10px; }
    .signin { flex: 1; display: flex; align-items: center; justify-content: center; padding: 24px; text-align: center; color: #4a5266; }
  `);

  constructor() {
    super();
    this.mode = 'closed';
    this._getToken = null;
    this.root.innerHTML = `
      <div class="panel" part="panel" hidden>
        <header><b>Agent</b><span class="conn" part="connection" data-state="disconnected">disconnected</span>
          <select name="mode" title="Work mode">${WORK_MODES.map((m) => `<option value="${m}">${m}</option>`).join('')}</select>
          <button data-act="memories" title="Your memories" aria-pressed="false" hidden>Memories</button>
          <button data-act="files" title="Files">Files</button><button data-act="min" title="Minimise">_</button>
          <button data-act="max" title="Maximise">□</button><button data-act="close" title="Close">×</button></header>
        <div class="err" hidden></div>
        <div class="signin" part="signin"><p></p></div>
        <div class="body" hidden><rtc-session-list></rtc-session-list><div class="chat"><rtc-context-bar></rtc-context-bar><rtc-task-panel></rtc-task-panel><rtc-message-list></rtc-message-list><rtc-composer></rtc-composer></div></div>
        <div class="page" hidden><rtc-memory-page></rtc-memory-page></div>
      </div>
      <button class="bubble" part="bubble" title="Open the agent" aria-label="Open the agent">✦</button>`;
    this.root.querySelector('.bubble').onclick = () => this.setMode(this.mode === 'closed' ? 'normal' : 'closed');
    this.root.querySelector('header').addEventListener('click', (e) => {
      const act = e.target.closest('button')?.dataset.act;
      if (act === 'close') this.setMode('closed');
      else if (act === 'min') this.setMode(this.mode === 'minimised' ? 'normal' : 'minimised');
      else if (act === 'max') this.setMode(this.mode === 'maximised' ? 'normal' : 'maximised');
      else if (act === 'files') this.filesButton();
      else if (act === 'memories') this.toggleMemories();
    });
    this.root.querySelector('select').onchange = (e) => this.agent && this.agent.setWorkMode(e.target.value);
    this.showSignin();
  }

  static get observedAttributes() { return ['open', 'signin-hint']; }
  attributeChangedCallback(name, _old, value) {
    if (name === 'open') this.setMode(value === null ? 'closed' : value || 'normal');
    else if (name === 'signin-hint') this.showSignin();
  }

  // Until the page hands over a token the panel says what to do, instead of an empty list that
  // looks broken. The host can word it (`signin-hint="…"`).
  showSignin() {
    const text = this.getAttribute('signin-hint')
      || 'You are not signed in yet. Sign in on this page, then the agent connects here.';
    this.root.querySelector('.signin p').textContent = text;
    const conn = this.root.querySelector('.conn');
    if (!this.started) { conn.dataset.state = 'disconnected'; conn.textContent = 'signed out'; }
  }

  get getToken() { return this._getToken; }
  set getToken(fn) { this._getToken = fn; this.maybeStart(); }

  // The page's agent prompt: the property when set (null or undefined gives the attribute back),
  // else the `agent-prompt` attribute. Read when a message creates a session, so a change
  // shapes the next new session; a session keeps the prompt it was created with.
  get agentPrompt() { return this._agentPrompt ?? (this.getAttribute('agent-prompt') || ''); }
  set agentPrompt(text) { this._agentPrompt = text === null || text === undefined ? null : String(text); }

  connectedCallback() {
    // A page may set properties before this element was defined: they sit on the instance and
    // would hide the class's accessors; they are taken over here.
    for (const prop of ['getToken', 'agentPrompt']) {
      if (!Object.hasOwn(this, prop)) continue;
      const value = this[prop];
      delete this[prop];
      this[prop] = value;
    }
    this.maybeStart();
  }

  maybeStart() {
    if (this.started || !this._getToken || !this.isConnected) return;
    this.started = true;
    this.root.querySelector('.signin').hidden = true;
    this.root.querySelector('.body').hidden = false;
    const agent = new Agent({ server: this.getAttribute('server') || location.origin, getToken: this._getToken,
      getAgentPrompt: () => this.agentPrompt });
    this.agent = agent;
    for (const sel of ['rtc-session-list', 'rtc-message-list', 'rtc-composer', 'rtc-context-bar', 'rtc-task-panel', 'rtc-memory-page']) this.root.querySelector(sel).agent = agent;
    this.root.querySelector('[data-act=memories]').hidden = false;
    agent.start().then(() => this.dispatchEvent(new CustomEvent('rtc-agent-ready'))).catch((err) => agent.fail(err));
  }

  update(state) {
    const conn = this.root.querySelector('.conn');
    conn.dataset.state = state.connection;
    conn.textContent = state.connection;
    this.root.querySelector('select').value = state.workMode;
    const err = this.root.querySelector('.err');
    err.hidden = !state.error;
    err.innerHTML = state.error ? `${esc(state.error)} <button>dismiss</button>` : '';
    if (state.error) err.querySelector('button').onclick = () => this.agent.store.set({ error: '' });
    this.showPage(state.page);
  }

  // The memories page takes the conversation's place (which stays as it was, hidden); focus goes
  // to its search field, and back to the header's "Memories" when it closes.
  showPage(page) {
    if (page === this.shownPage) return;
    const was = this.shownPage;
    this.shownPage = page;
    const memories = page === 'memories';
    this.root.querySelector('.body').hidden = memories;
    this.root.querySelector('.page').hidden = !memories;
    const btn = this.root.querySelector('[data-act=memories]');
    btn.setAttribute('aria-pressed', String(memories));
    if (memories) this.root.querySelector('rtc-memory-page').shown();
    else if (was === 'memories') btn.focus();
  }

  // From the memories page, "Files" goes back to the conversation with the files shown.
  filesButton() {
    if (this.agent && this.agent.store.state.page === 'memories') {
      this.agent.memories.closePage();
      if (this.root.querySelector('rtc-file-panel')) return;
    }
    this.toggleFiles();
  }

  toggleMemories() {
    if (!this.agent) return;
    if (this.agent.store.state.page === 'memories') this.agent.memories.closePage();
    else this.agent.memories.openPage();
  }

  setMode(mode) {
    this.mode = mode;
    const panel = this.root.querySelector('.panel');
    panel.hidden = mode === 'closed';
    panel.classList.toggle('maximised', mode === 'maximised');
    panel.classList.toggle('minimised', mode === 'minimised');
  }

  toggleFiles() {
    const body = this.root.querySelector('.body');
    let panel = body.querySelector('rtc-file-panel');
    if (panel) { panel.remove(); body.classList.remove('files'); return; }
    panel = document.createElement('rtc-file-panel');
    body.appendChild(panel);
    body.classList.add('files');
    if (this.agent) panel.agent = this.agent;
  }
}

customElements.define('rtc-agent', RtcAgent);
