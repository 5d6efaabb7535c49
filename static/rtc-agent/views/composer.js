// <rtc-composer>: the message box (Enter sends, Shift+Enter breaks the line), Stop while the
// session works, and a failed send with Retry (the same client_id, so never a duplicate).
import { View, esc } from './base.js';

class Composer extends View {
  static styles = View.css(`
    :host { display: block; border-top: 1px solid #e3e6ee; padding: 8px; }
    textarea { width: 100%; resize: none; height: 56px; }
    .failed { color: #9b2a20; font-size: 12px; margin-bottom: 4px; }
  `);

  constructor() {
    super();
    this.root.innerHTML = `<div class="failed" hidden></div><div class="row"><textarea class="grow" part="input" placeholder="Message the agent…"></textarea>
      <div><button class="primary" data-act="send">Send</button><br><button data-act="stop" hidden>Stop</button></div></div>`;
    this.input = this.root.querySelector('textarea');
    this.input.addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); this.submit(); } });
    this.root.querySelector('[data-act=send]').onclick = () => this.submit();
    this.root.querySelector('[data-act=stop]').onclick = () => this.agent.stop(this.agent.store.state.currentSession);
  }

  submit() {
    const text = this.input.value.trim();
    if (!text) return;
    this.input.value = '';
    this.agent.send(text);
  }

  update(state) {
    const session = state.sessions[state.currentSession];
    this.root.querySelector('[data-act=stop]').hidden = !(session && session.status === 'active');
    const failed = this.root.querySelector('.failed');
    const sending = state.sending;
    failed.hidden = !(sending && sending.failed);
    if (sending && sending.failed) {
      failed.innerHTML = `Not sent: ${esc(sending.error || '')} <button data-act="retry">Retry</button>`;
      failed.querySelector('button').onclick = () => this.agent.retrySend();
    }
  }
}

customElements.define('rtc-composer', Composer);
