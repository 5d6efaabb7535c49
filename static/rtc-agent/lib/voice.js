// Live voice calls (issue 15; docs/widget.md, "Voice calls"): the widget's voice plugin. No DOM
// here: views/call-panel.js draws the store's `call`, and tests drive this class directly.
//
// A call is two realtime channels of the user's:
//   v1.channel.register {name, direction: 'in'|'out', realtime: true, session_id?}
//   v1.channel.input {name, text, client_id} -> {delivered, live_call_id, message_id, interrupted}
//   v1.channel.unregister {name} -> {unregistered, stopped: [live_call_id, ...]}
// Starting registers both (bound to the open session, if any), then sends the agent a user
// message naming them; the agent answers it by creating a realtime child (rt_children) that
// reads the input channel and writes the output channel. Registering comes first so that the
// channels exist when the agent's turn runs. Its text arrives on the user's live channel:
//   {type: 'live.call', status: 'running'|'stopped', live_call_id, input_channel, output_channel, session_id}
//   {type: 'channel.output', channel, turn_id, message_id, delta, seq}   {type: 'channel.output.end', channel, turn_id, message_id, text, interrupted}
//   {type: 'channel.interrupt', channel, input_channel, turn_id}
// An input is an interruption by design: the child's running answer is cut and a new turn
// starts. Speech synthesis stops at once then, and whenever the user starts talking.
//
// Speech: recognition where the browser has it (`SpeechRecognition`, `webkitSpeechRecognition`),
// continuous with interim results; each final result is sent. Synthesis where it has
// `speechSynthesis`: each answer is spoken sentence by sentence as its text arrives. Typed input
// always works (the only input where recognition is missing or refused).
//
// Channels of a call the page never hung up (a tab closed, a crash) would stay registered and
// keep their child on the line: each active call is noted in localStorage with a heartbeat, and
// notes whose page went away (or whose heartbeat stopped) are unregistered by the next start of
// the widget or the next call, which also hands the call back to the agent.
import { uuid } from './ids.js';
import { getLocale } from './i18n.js';

const TRANSCRIPT_MAX = 200;
const HEARTBEAT_MS = 30000;
const STALE_MS = 90000;
const RESTART_MS = 300; // recognition stops by itself after a silence: it is started again
const MAX_FAILS = 5; // recognition errors in a row (the network, say) before speech input is given up
const REFUSED = ['not-allowed', 'service-not-allowed', 'audio-capture', 'language-not-supported'];
const ACTIVE = new Set(['starting', 'waiting', 'connected']);
// Where a spoken sentence ends: .!? (and …) before a space, or CJK punctuation and new lines.
const SENTENCE_END = /[.!?…]+["'”’)\]]*(?=\s)|[。！？；\n]+/g;

// The browser's speech APIs, or nulls where it lacks them.
export function browserSpeech(win = globalThis) {
  return {
    Recognition: win.SpeechRecognition || win.webkitSpeechRecognition || null,
    synth: win.speechSynthesis || null,
    Utterance: win.SpeechSynthesisUtterance || null,
  };
}

// The user message that asks the agent to take the call.
export function announcement({ input, output }) {
  return `Voice call started. Input channel: ${input}, output channel: ${output}. `
    + 'Answer it with rt_children (action create) using these channels.';
}

// The end of the last whole sentence in `text` after `from` (-1: none yet).
export function sentenceEnd(text, from = 0) {
  let end = -1;
  SENTENCE_END.lastIndex = from;
  for (let m = SENTENCE_END.exec(text); m; m = SENTENCE_END.exec(text)) end = m.index + m[0].length;
  return end;
}

const norm = (s) => String(s || '').toLowerCase().replace(/[^\p{L}\p{N}]+/gu, ' ').trim();

export class Voice {
  // `agent` gives conn, store, emit, send and prefsKey; `speech` the browser's speech APIs.
  constructor({ agent, store, speech = browserSpeech() }) {
    this.agent = agent;
    this.store = store;
    this.speech = speech;
    this.rec = null;
    this.speaking = ''; // the text of the utterances queued, to tell our own voice from the user's
    this.entries = new Map(); // transcript entry by key (`you:<id>`, `agent:<message_id>`)
    this.heartbeat = null;
    this._onPageHide = () => this.abandon({ hangUp: true });
    addEventListener('pagehide', this._onPageHide);
  }

  get call() { return this.store.state.call; }
  get active() { return !!(this.call && ACTIVE.has(this.call.status)); }
  get canListen() { return !!this.speech.Recognition; }
  get canSpeak() { return !!(this.speech.synth && this.speech.Utterance); }

  // The pair of names for a new call (a test may replace this to know them in advance).
  channelNames() {
    const id = uuid().replace(/-/g, '').slice(0, 16);
    return { input: `voice-in-${id}`, output: `voice-out-${id}` };
  }

  rpc(method, params) { return this.agent.conn.rpc(method, params); }

  changed() { this.store.changed(); }

  // --- the call ------------------------------------------------------------------------------
  // Register the channels, then announce the call in the open session (or a new one).
  async start() {
    if (this.active) return;
    this.sweep().catch((err) => console.warn('rtc-agent: voice channels left over', err.message || err));
    const names = this.channelNames();
    const sessionId = this.agent.store.state.currentSession || null;
    this.entries.clear();
    this.store.set({ call: {
      status: 'starting', input: names.input, output: names.output, sessionId, liveCallId: null,
      childSessionId: null, transcript: [], interim: '', interrupted: false, notice: null,
      micMuted: false, soundMuted: false, listening: false,
      speechIn: this.canListen, speechOut: this.canSpeak,
    } });
    const call = this.call;
    const bind = sessionId ? { session_id: sessionId } : {};
    try {
      await this.rpc('v1.channel.register', { name: names.input, direction: 'in', realtime: true, ...bind });
      await this.rpc('v1.channel.register', { name: names.output, direction: 'out', realtime: true, ...bind });
    } catch (err) {
      const { left } = await this.unregister([names.input, names.output]);
      if (left) this.saveNotes([...this.notes(), { ...names, at: 0 }]); // swept later
      if (this.call === call) this.store.set({ call: { ...call, status: 'failed', notice: { key: 'call.startFailed', vars: { error: err.message || String(err) } } } });
      return;
    }
    if (this.call !== call) return;
    this.note(names);
    call.status = 'waiting'; // before the send: the agent may pick up before its reply arrives
    this.changed();
    this.agent.emit('callStarted', { inputChannel: names.input, outputChannel: names.output, sessionId });
    this.listen();
    const sid = await this.agent.send(announcement(names), null, [], { checked: true });
    if (this.call !== call) return;
    call.sessionId = sid || call.sessionId;
    if (!sid) call.notice = { key: 'call.announceFailed' };
    this.changed();
  }

  // Hang up: both channels unregistered (the server stops the call and hands it back to the
  // agent). -> the ids of the live calls stopped.
  async hangUp() {
    const call = this.call;
    if (!call || !ACTIVE.has(call.status)) return [];
    call.status = 'ending';
    this.stopListening();
    this.quiet();
    this.changed();
    const { stopped, left } = await this.unregister([call.input, call.output]);
    if (left) this.abandon({ call }); // kept for the next start to sweep
    else this.forget(call.input);
    call.status = 'ended';
    call.interim = '';
    this.changed();
    this.agent.emit('callEnded', { inputChannel: call.input, outputChannel: call.output, sessionId: call.sessionId, stopped });
    return stopped;
  }

  // Close the panel of a call that ended.
  dismiss() {
    if (this.call && !ACTIVE.has(this.call.status) && this.call.status !== 'ending') this.store.set({ call: null });
  }

  // -> {stopped: the live calls stopped, left: a channel could not be unregistered}; a channel
  // that is gone already counts as unregistered.
  async unregister(names) {
    const stopped = [];
    let left = false;
    for (const name of names) {
      try {
        const res = await this.rpc('v1.channel.unregister', { name });
        for (const id of (res && res.stopped) || []) if (!stopped.includes(id)) stopped.push(id);
      } catch (err) {
        if (err.code === 404 || /not_found$/.test(err.slug || '')) continue;
        left = true;
        console.warn('rtc-agent: v1.channel.unregister', name, err.message || err);
      }
    }
    return { stopped, left };
  }

  // Say something on the call (typed, or a final speech result).
  async say(text, { spoken = false } = {}) {
    text = String(text || '').trim();
    const call = this.call;
    if (!text || !call || !ACTIVE.has(call.status) || call.status === 'starting') return null;
    if (spoken && this.isEcho(text)) return null;
    this.quiet(); // the user talks: the agent's voice stops at once
    const entry = this.entry(`you:${uuid()}`, 'you');
    entry.text = text;
    entry.state = 'sending';
    entry.spoken = spoken;
    call.interrupted = false; // set again below if this input cuts an answer
    this.changed();
    try {
      const res = await this.rpc('v1.channel.input', { name: call.input, text, client_id: uuid() });
      entry.state = res && res.delivered ? 'delivered' : 'undelivered';
      if (res && res.interrupted) this.interrupted(null);
      return res;
    } catch (err) {
      entry.state = 'failed';
      entry.error = err.message || String(err);
      return null;
    } finally { this.changed(); }
  }

  toggleMic() {
    const call = this.call;
    if (!call || !ACTIVE.has(call.status)) return;
    call.micMuted = !call.micMuted;
    if (call.micMuted) this.stopListening();
    else this.listen();
    this.changed();
  }

  toggleSound() {
    const call = this.call;
    if (!call) return;
    call.soundMuted = !call.soundMuted;
    if (call.soundMuted) this.quiet();
    this.changed();
  }

  // --- live publications ---------------------------------------------------------------------
  // What lib/sync.js receives on `live:u=<id>` that is not a chunk.
  onLive(data) {
    const call = this.call;
    if (!call || !data || !ACTIVE.has(call.status)) return;
    if (data.type === 'live.call') this.onCall(call, data);
    else if (data.type === 'channel.output' && data.channel === call.output) this.onOutput(data);
    else if (data.type === 'channel.output.end' && data.channel === call.output) this.onOutputEnd(data);
    else if (data.type === 'channel.interrupt' && data.channel === call.output) this.interrupted(data.turn_id);
  }

  onCall(call, d) {
    if (d.input_channel !== call.input) return;
    if (d.status === 'running') {
      const was = call.liveCallId;
      const notice = call.notice && call.notice.speech ? call.notice : null; // speech notes stay
      Object.assign(call, { status: 'connected', liveCallId: d.live_call_id, childSessionId: d.session_id || null, notice });
      this.changed();
      if (was !== d.live_call_id) {
        this.agent.emit('callConnected', { inputChannel: call.input, outputChannel: call.output, liveCallId: d.live_call_id, sessionId: call.sessionId });
      }
    } else if (d.status === 'stopped' && d.live_call_id === call.liveCallId) {
      // The agent stopped its side (it may start a new one on the same channels): wait again.
      this.quiet();
      Object.assign(call, { status: 'waiting', liveCallId: null, childSessionId: null, notice: { key: 'call.agentLeft' } });
      this.changed();
    }
  }

  // One entry per answer: a turn that calls a tool has several ("One moment.", then the
  // answer after the tool), each its own message; seq restarts when a turn resumes.
  agentEntry(d) {
    const entry = this.entry(`agent:${d.message_id || d.turn_id}`, 'agent');
    entry.turnId = d.turn_id;
    return entry;
  }

  onOutput(d) {
    const entry = this.agentEntry(d);
    if (entry.final || !(d.seq > entry.seq)) return;
    entry.seq = d.seq;
    entry.text += d.delta || '';
    this.speakSome(entry, false);
    this.changed();
  }

  onOutputEnd(d) {
    const entry = this.agentEntry(d);
    if (entry.final) return;
    if (typeof d.text === 'string' && (d.text || !entry.text)) entry.text = d.text;
    entry.final = true;
    if (d.interrupted) entry.interrupted = true;
    else this.speakSome(entry, true);
    this.changed();
  }

  // The running answer was cut by an input (turnId: which one, when known).
  interrupted(turnId) {
    const call = this.call;
    if (!call) return;
    call.interrupted = true;
    this.quiet();
    for (const entry of this.entries.values()) {
      if (entry.who === 'agent' && !entry.final && (!turnId || entry.turnId === turnId)) {
        entry.interrupted = true;
        entry.spokenTo = Infinity;
      }
    }
    this.changed();
  }

  // The transcript entry of `key`, made (and appended) the first time.
  entry(key, who) {
    let entry = this.entries.get(key);
    if (entry) return entry;
    entry = { key, who, text: '', seq: 0, final: false, interrupted: false, spokenTo: 0, state: '' };
    this.entries.set(key, entry);
    const list = this.call.transcript;
    list.push(entry);
    if (list.length > TRANSCRIPT_MAX) for (const gone of list.splice(0, list.length - TRANSCRIPT_MAX)) this.entries.delete(gone.key);
    return entry;
  }

  // --- speech out ----------------------------------------------------------------------------
  // Queue the whole sentences of an answer not spoken yet (all of it when it ended).
  speakSome(entry, ended) {
    if (!this.canSpeak || entry.spokenTo === Infinity) return;
    const end = ended ? entry.text.length : sentenceEnd(entry.text, entry.spokenTo);
    if (end <= entry.spokenTo) return;
    const text = entry.text.slice(entry.spokenTo, end).trim();
    entry.spokenTo = end;
    if (!text || (this.call && this.call.soundMuted)) return;
    const { synth, Utterance } = this.speech;
    const u = new Utterance(text);
    u.lang = getLocale();
    this.speaking = `${this.speaking} ${text}`.slice(-2000);
    u.onend = () => { if (!synth.speaking && !synth.pending) this.speaking = ''; };
    synth.speak(u);
  }

  // Stop speaking now (an interruption, the user talking, hang-up).
  quiet() {
    if (!this.speech.synth) return;
    this.speaking = '';
    try { this.speech.synth.cancel(); } catch { /* nothing was speaking */ }
  }

  // A recognised phrase that is only our own voice coming back through the microphone.
  isEcho(text) {
    const heard = norm(text);
    return !!heard && !!this.speaking && norm(this.speaking).includes(heard);
  }

  // --- speech in -----------------------------------------------------------------------------
  listen() {
    const call = this.call;
    const R = this.speech.Recognition;
    if (!R || this.rec || !call || !call.speechIn || call.micMuted || !ACTIVE.has(call.status)) return;
    let rec;
    try { rec = new R(); } catch (err) { this.noSpeechIn(err.message || String(err)); return; }
    rec.continuous = true;
    rec.interimResults = true;
    rec.lang = getLocale();
    rec.onstart = () => { call.listening = true; this.changed(); };
    rec.onresult = (e) => { this.recFails = 0; this.onResult(e); };
    rec.onerror = (e) => {
      // 'no-speech' and 'aborted' are ordinary; the others, refused or repeated, end speech input.
      if (e.error === 'no-speech' || e.error === 'aborted') return;
      this.recFails = (this.recFails || 0) + 1;
      if (REFUSED.includes(e.error) || this.recFails > MAX_FAILS) this.noSpeechIn(e.error);
    };
    rec.onend = () => {
      if (this.rec !== rec) return;
      this.rec = null;
      call.listening = false;
      call.interim = '';
      this.changed();
      if (this.call === call) setTimeout(() => this.listen(), RESTART_MS);
    };
    this.rec = rec;
    try { rec.start(); } catch (err) { this.rec = null; this.noSpeechIn(err.message || String(err)); }
  }

  onResult(e) {
    const call = this.call;
    if (!call) return;
    let interim = '';
    for (let i = e.resultIndex; i < e.results.length; i++) {
      const result = e.results[i];
      const text = result[0] ? result[0].transcript : '';
      if (result.isFinal) this.say(text, { spoken: true });
      else interim += text;
    }
    // Barge-in: the user's voice (not ours coming back) stops the agent's.
    if (interim.trim() && !this.isEcho(interim)) this.quiet();
    call.interim = interim.trim();
    this.changed();
  }

  stopListening() {
    const rec = this.rec;
    this.rec = null;
    if (this.call) { this.call.listening = false; this.call.interim = ''; }
    if (rec) { try { rec.abort(); } catch { /* already stopped */ } }
  }

  // Recognition refused or missing a microphone: typing stays.
  noSpeechIn(reason) {
    this.stopListening();
    const call = this.call;
    if (!call) return;
    call.speechIn = false;
    const key = reason === 'not-allowed' || reason === 'service-not-allowed' ? 'call.micRefused'
      : reason === 'audio-capture' ? 'call.micMissing' : 'call.noMic';
    call.notice = { key, vars: { reason }, speech: true };
    this.changed();
  }

  // --- calls left behind -----------------------------------------------------------------------
  notesKey() { return `${this.agent.prefsKey || 'rtc-agent'}:voice-calls`; }

  notes() {
    try { return JSON.parse(localStorage.getItem(this.notesKey()) || '[]').filter((n) => n && n.input && n.output); } catch { return []; }
  }

  saveNotes(notes) {
    try { localStorage.setItem(this.notesKey(), JSON.stringify(notes)); } catch { /* storage refused: nothing kept */ }
  }

  note({ input, output }) {
    this.saveNotes([...this.notes().filter((n) => n.input !== input), { input, output, at: Date.now() }]);
    clearInterval(this.heartbeat);
    this.heartbeat = setInterval(() => {
      const call = this.call;
      if (!call || !ACTIVE.has(call.status)) { clearInterval(this.heartbeat); return; }
      this.saveNotes(this.notes().map((n) => (n.input === call.input ? { ...n, at: Date.now() } : n)));
    }, HEARTBEAT_MS);
  }

  forget(input) {
    clearInterval(this.heartbeat);
    this.heartbeat = null;
    this.saveNotes(this.notes().filter((n) => n.input !== input));
  }

  // The page goes away during a call: its note is marked stale for the next start to sweep
  // (and, on `pagehide`, the channels unregistered if the socket still takes it).
  abandon({ hangUp = false, call = this.call } = {}) {
    if (!call || !(ACTIVE.has(call.status) || call.status === 'ending')) return;
    clearInterval(this.heartbeat);
    this.saveNotes(this.notes().map((n) => (n.input === call.input ? { ...n, at: 0 } : n)));
    if (hangUp) this.unregister([call.input, call.output]);
  }

  // Unregister the channels of calls whose page is gone (-> how many calls were swept; those
  // the server could not be told of stay noted).
  async sweep() {
    const now = Date.now();
    const current = this.call && this.call.input;
    const stale = this.notes().filter((n) => n.input !== current && now - (Number(n.at) || 0) > STALE_MS);
    const gone = new Set();
    for (const n of stale) if (!(await this.unregister([n.input, n.output])).left) gone.add(n.input);
    if (gone.size) this.saveNotes(this.notes().filter((n) => !gone.has(n.input)));
    return gone.size;
  }

  // The widget is destroyed: no more speech; the call's note stays for the next start to sweep.
  destroy() {
    removeEventListener('pagehide', this._onPageHide);
    this.abandon();
    clearInterval(this.heartbeat);
    this.stopListening();
    this.quiet();
  }
}
