// <rtc-call-panel>: the voice call (lib/voice.js), between the conversation and the composer
// while one is on or has just ended. It shows the call's state (starting, waiting for the agent
// to pick up, connected, ended), a mark while the last thing said cut the agent's answer short,
// the live transcript (what the user said, typed or recognised, and the agent's answers as they
// stream, each cut answer marked), what speech recognition hears before it is final, and a field
// to type what to say: the only input where the browser has no speech recognition, and always
// usable. Buttons: mute the microphone, mute the agent's voice, hang up; Close once it ended.
// Transcript lines are keyed and replaced only when they changed, like the message list.
import { View, esc } from './base.js';
import { t } from '../lib/i18n.js';
import { micIcon, soundIcon } from './icons.js';

const ON = new Set(['waiting', 'connected']);

class CallPanel extends View {
  static styles = View.css(`
    :host { display: flex; flex-direction: column; min-height: 0; max-height: 60%; flex: 0 1 auto; overflow: hidden;
      border-top: 1px solid var(--rtc-color-border, #e3e6ee); background: var(--rtc-color-surface-2, #fafbfd); }
    :host([hidden]) { display: none; }
    section { display: flex; flex-direction: column; flex: 1 1 auto; min-height: 0; }
    section > * { flex: none; }
    .head { display: flex; flex-wrap: wrap; gap: 4px 6px; align-items: center; padding: 6px 10px 4px; }
    .head .grow { flex: 1; }
    .state { display: inline-flex; gap: 6px; align-items: center; font-weight: 600; font-size: 13px; }
    .dot { width: 9px; height: 9px; border-radius: 50%; background: var(--rtc-color-muted, #5f677c); flex: none; }
    [data-status="waiting"] .dot, [data-status="starting"] .dot { background: var(--rtc-color-warning, #7a5a00); animation: pulse 1.2s ease-in-out infinite; }
    [data-status="connected"] .dot { background: var(--rtc-color-success, #1e6b32); }
    [data-status="failed"] .dot { background: var(--rtc-color-danger, #9b2a20); }
    @keyframes pulse { 50% { opacity: .35; } }
    @media (prefers-reduced-motion: reduce) { .dot { animation: none !important; } }
    .cut { font-size: 12px; font-weight: 600; border-radius: 10px; padding: 1px 8px; background: var(--rtc-color-surface-3, #eef0f5); color: var(--rtc-color-warning, #7a5a00); }
    .head button { padding: 1px 7px; font-size: 12.5px; display: inline-flex; gap: 4px; align-items: center; }
    .head button[aria-pressed="true"] { background: var(--rtc-color-selected, #e6ecfb); border-color: var(--rtc-color-accent, #2952cc); }
    .head button.danger { border-color: var(--rtc-color-danger, #9b2a20); }
    .notice { margin: 0 10px 4px; font-size: 12px; padding: 3px 8px; border-radius: 6px; background: var(--rtc-color-danger-bg, #fdf1f0); color: var(--rtc-color-danger, #9b2a20); }
    .log { flex: 1 1 auto; min-height: 48px; overflow: auto; padding: 2px 10px; font-size: 13px; }
    .line { margin: 2px 0; overflow-wrap: anywhere; white-space: pre-wrap; }
    .line .who { font-weight: 700; margin-right: 4px; }
    .line.you .who { color: var(--rtc-color-link, #2952cc); }
    .line .mark { margin-left: 4px; }
    .line[data-interrupted] .text { color: var(--rtc-color-text-2, #4a5266); }
    .interim { margin: 0 10px; font-size: 12.5px; font-style: italic; color: var(--rtc-color-text-2, #4a5266); overflow-wrap: anywhere; }
    .hint { margin: 2px 10px; }
    form { display: flex; gap: 6px; padding: 4px 10px 8px; }
    form input { flex: 1; min-width: 0; }
  `);

  constructor() {
    super();
    this.hidden = true;
    this.lines = new Map(); // entry key -> {node, sig}
    this.root.innerHTML = `<section part="call-panel" data-i18n-aria-label="call.title">
      <div class="head"><span class="state"><span class="dot" aria-hidden="true"></span><span class="status" part="call-status" role="status"></span></span>
        <span class="cut" part="call-interrupted" role="status" hidden data-i18n="call.interrupted"></span><span class="grow"></span>
        <button type="button" data-act="mic" aria-pressed="false" hidden data-i18n-title="call.muteMicTitle">${micIcon}<span data-i18n="call.muteMic"></span></button>
        <button type="button" data-act="sound" aria-pressed="false" hidden data-i18n-title="call.muteSoundTitle">${soundIcon}<span data-i18n="call.muteSound"></span></button>
        <button type="button" class="danger" part="hang-up" data-act="hangup" data-i18n="call.hangUp"></button>
        <button type="button" data-act="dismiss" hidden data-i18n="call.close"></button></div>
      <div class="notice" role="alert" hidden></div>
      <div class="log" part="call-transcript" role="log" tabindex="0" data-i18n-aria-label="call.transcript"></div>
      <div class="interim" part="call-interim" aria-hidden="true" hidden></div>
      <p class="hint muted" hidden data-i18n="call.noSpeech"></p>
      <form><input type="text" name="say" part="call-input" autocomplete="off" data-i18n-aria-label="call.say" data-i18n-placeholder="call.sayPlaceholder">
        <button type="submit" class="primary" data-i18n="call.sayButton"></button></form></section>`;
    this.section = this.root.querySelector('section');
    this.log = this.root.querySelector('.log');
    this.input = this.root.querySelector('input');
    this.root.querySelector('form').addEventListener('submit', (e) => {
      e.preventDefault();
      const text = this.input.value.trim();
      if (!text || !this.agent) return;
      this.input.value = '';
      this.agent.voice.say(text);
    });
    this.root.querySelector('.head').addEventListener('click', (e) => {
      const act = e.target.closest('button[data-act]')?.dataset.act;
      const voice = this.agent && this.agent.voice;
      if (!voice) return;
      if (act === 'hangup') voice.hangUp();
      else if (act === 'dismiss') voice.dismiss();
      else if (act === 'mic') voice.toggleMic();
      else if (act === 'sound') voice.toggleSound();
    });
  }

  update(state) {
    const call = state.call;
    this.hidden = !call;
    if (!call) { this.lines.forEach((l) => l.node.remove()); this.lines.clear(); return; }
    const on = ON.has(call.status);
    this.section.dataset.status = call.status;
    const status = this.root.querySelector('.status');
    const words = t(`call.status.${call.status}`);
    if (status.textContent !== words) status.textContent = words;
    this.root.querySelector('.cut').hidden = !(call.interrupted && on);
    const mic = this.root.querySelector('[data-act=mic]');
    mic.hidden = !call.speechIn || !on;
    mic.setAttribute('aria-pressed', String(!!call.micMuted));
    const sound = this.root.querySelector('[data-act=sound]');
    sound.hidden = !call.speechOut || !on;
    sound.setAttribute('aria-pressed', String(!!call.soundMuted));
    const ended = call.status === 'ended' || call.status === 'failed';
    this.root.querySelector('[data-act=hangup]').hidden = ended;
    this.root.querySelector('[data-act=hangup]').disabled = call.status === 'ending';
    this.root.querySelector('[data-act=dismiss]').hidden = !ended;
    const notice = this.root.querySelector('.notice');
    const said = call.notice ? t(call.notice.key, call.notice.vars || {}) : '';
    notice.hidden = !said;
    if (notice.textContent !== said) notice.textContent = said;
    const interim = this.root.querySelector('.interim');
    interim.hidden = !call.interim;
    interim.textContent = call.interim ? `${call.interim}…` : '';
    this.root.querySelector('.hint').hidden = call.speechIn || ended || (call.notice && call.notice.speech);
    this.input.disabled = !on;
    this.root.querySelector('form button').disabled = !on;
    this.renderLines(call.transcript || []);
    // A call that just got on the line (its phone button is disabled now): typing goes here.
    if (on && this.focusedFor !== call) { this.focusedFor = call; this.input.focus(); }
  }

  renderLines(entries) {
    const atBottom = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 30;
    const keep = new Set(entries.map((e) => e.key));
    for (const [key, line] of this.lines) if (!keep.has(key)) { line.node.remove(); this.lines.delete(key); }
    let prev = null;
    for (const entry of entries) {
      if (entry.who === 'agent' && !entry.text && !entry.final) continue;
      // the attributes count too: an answer cut, then ended, reads the same
      const sig = `${entry.final}|${entry.interrupted}|${entry.state}|${this.lineHtml(entry)}`;
      let line = this.lines.get(entry.key);
      if (!line || line.sig !== sig) {
        const node = document.createElement('div');
        node.className = `line ${entry.who}`;
        node.dataset.key = entry.key;
        if (entry.interrupted) node.dataset.interrupted = '';
        if (entry.who === 'agent') node.dataset.final = String(!!entry.final);
        if (entry.state) node.dataset.state = entry.state;
        node.innerHTML = this.lineHtml(entry);
        if (line) line.node.replaceWith(node);
        line = { node, sig };
        this.lines.set(entry.key, line);
      }
      const expected = prev ? prev.nextSibling : this.log.firstChild;
      if (expected !== line.node) this.log.insertBefore(line.node, expected);
      prev = line.node;
    }
    if (atBottom) this.log.scrollTop = this.log.scrollHeight;
  }

  lineHtml(e) {
    const who = `<span class="who">${esc(t(e.who === 'you' ? 'call.you' : 'call.agent'))}:</span>`;
    let mark = '';
    if (e.who === 'you') {
      if (e.state === 'sending') mark = '…';
      else if (e.state === 'undelivered') mark = t('call.notHeard');
      else if (e.state === 'failed') mark = t('call.notSent', { error: e.error || '' });
    } else if (e.interrupted) mark = t('call.cutOff');
    else if (!e.final) mark = '▍';
    return `${who}<span class="text">${esc(e.text)}</span>${mark ? `<span class="mark muted">${esc(mark)}</span>` : ''}`;
  }
}

customElements.define('rtc-call-panel', CallPanel);
