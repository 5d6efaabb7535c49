// Several tabs of one site, one connection (opt-in: the `share-connection` attribute or
// `shareConnection: true`). The tabs of one server and user elect a leader with the Web Locks
// API (the tab holding the lock `rtc-agent-tabs:<server>:<user>` until it closes); only the
// leader opens the WebSocket. It relays what arrives (publications, connection state,
// subscriptions) to the others over a BroadcastChannel, and runs their RPCs on its socket.
// Followers queue for the lock: when the leader tab closes, one of them takes over and connects
// from the topic position it followed (the server replays what was missed). The VFS, the
// outbox and the runs log are one IndexedDB database for all tabs, so a result the old leader
// stored is delivered by the new one; a call is still run by one tab only (the server's
// conditional `executing` transition).
import { Connection, RpcError } from './connection.js';
import { uuid } from './ids.js';

const RPC_TIMEOUT_MS = 20000;

export const canShare = () => typeof BroadcastChannel === 'function' && !!(navigator.locks && navigator.locks.request);

export class SharedConnection {
  // The same constructor and interface as Connection, plus `name` (what the tabs share).
  constructor({ name, server, getToken, onState, onSubscribed, onTopic, onLive }) {
    Object.assign(this, { name, server, _getToken: getToken });
    this.handlers = { onState, onSubscribed, onTopic, onLive };
    this.real = null; // the leader's Connection
    this.id = uuid();
    this.state = 'connecting';
    this.subscribed = null; // the last subscribed context (leader and followers)
    this.position = null;
    this.waiting = new Map(); // rpc id -> {resolve, reject, timer}
    this.remoteLimits = null;
    this.followerToken = '';
    this.stopped = false;
    this.abort = new AbortController();
  }

  get role() { return this.real ? 'leader' : 'follower'; }
  get connected() { return this.real ? this.real.connected : this.state === 'connected'; }
  get limits() { return this.real ? this.real.limits : this.remoteLimits || { max_frame_bytes: 4 * 1024 * 1024, max_result_bytes: 2 * 1024 * 1024 }; }
  get token() { return this.real ? this.real.token : this.followerToken; }
  get client() { return this.real ? this.real.client : null; }

  async token_() {
    if (this.real) return this.real.token_();
    this.followerToken = await this._getToken();
    return this.followerToken;
  }

  start({ token, topic, position }) {
    this.topic = topic;
    this.position = position || null;
    this.followerToken = token;
    this.channel = new BroadcastChannel(this.name);
    this.channel.onmessage = (e) => this.onMessage(e.data || {});
    navigator.locks.request(this.name, { ifAvailable: true }, (lock) => {
      if (this.stopped) return null;
      if (lock) return this.lead(token, this.position);
      this.follow();
      navigator.locks.request(this.name, { signal: this.abort.signal }, () => (this.stopped ? null : this.promote()))
        .catch(() => { /* aborted by stop() */ });
      return null;
    });
  }

  // --- leader ----------------------------------------------------------------------------------
  // -> a promise that holds the lock until stop().
  lead(token, position) {
    const post = (msg) => { if (!this.stopped) this.channel.postMessage(msg); };
    const real = new Connection({
      server: this.server, getToken: this._getToken,
      onState: (s) => { this.state = s; post({ t: 'state', state: s, limits: real.limits }); this.handlers.onState(s); },
      onSubscribed: (ctx) => {
        this.subscribed = { recovered: !!ctx.recovered, streamPosition: ctx.streamPosition };
        post({ t: 'subscribed', ctx: this.subscribed });
        this.handlers.onSubscribed(ctx);
      },
      onTopic: (ctx) => { post({ t: 'topic', ctx: { channel: ctx.channel, data: ctx.data, offset: ctx.offset } }); this.handlers.onTopic(ctx); },
      onLive: (ctx) => { post({ t: 'live', ctx: { channel: ctx.channel, data: ctx.data } }); this.handlers.onLive(ctx); },
    });
    this.real = real;
    real.start({ token, topic: this.topic, position });
    post({ t: 'leader', from: this.id });
    return new Promise((resolve) => { this.releaseLock = resolve; });
  }

  async promote() {
    for (const w of this.waiting.values()) { clearTimeout(w.timer); w.reject(new RpcError(0, 'the leading tab closed')); }
    this.waiting.clear();
    let token = this.followerToken;
    try { token = await this._getToken(); } catch (err) { console.warn('rtc-agent: token for the new leading tab', err); }
    return this.lead(token, this.position);
  }

  async answer(msg) {
    let reply;
    try { reply = { t: 'rpc-reply', id: msg.id, to: msg.from, data: await this.real.rpc(msg.method, msg.data) }; }
    catch (err) { reply = { t: 'rpc-reply', id: msg.id, to: msg.from, error: { code: err.code || 0, message: err.message, raw: rawMessage(err) } }; }
    if (!this.stopped) this.channel.postMessage(reply);
  }

  // --- follower --------------------------------------------------------------------------------
  follow() {
    this.handlers.onState('connecting');
    this.channel.postMessage({ t: 'hello', from: this.id });
  }

  onMessage(msg) {
    if (this.stopped) return;
    if (this.real) {
      if (msg.t === 'hello') {
        this.channel.postMessage({ t: 'welcome', to: msg.from, state: this.state, limits: this.real.limits, subscribed: this.subscribed });
      } else if (msg.t === 'rpc') this.answer(msg);
      return;
    }
    if (msg.t === 'welcome' && msg.to === this.id) {
      this.remoteLimits = msg.limits;
      this.setState(msg.state);
      if (msg.subscribed) this.onSubscribed({ ...msg.subscribed, recovered: false }); // load everything once
    } else if (msg.t === 'leader') {
      this.channel.postMessage({ t: 'hello', from: this.id }); // a new leader: catch up with it
    } else if (msg.t === 'state') {
      this.remoteLimits = msg.limits;
      this.setState(msg.state);
    } else if (msg.t === 'subscribed') this.onSubscribed(msg.ctx);
    else if (msg.t === 'topic') {
      if (msg.ctx.offset) this.position = { ...(this.position || {}), offset: msg.ctx.offset };
      this.handlers.onTopic(msg.ctx);
    } else if (msg.t === 'live') this.handlers.onLive(msg.ctx);
    else if (msg.t === 'rpc-reply' && msg.to === this.id) {
      const w = this.waiting.get(msg.id);
      if (!w) return;
      this.waiting.delete(msg.id);
      clearTimeout(w.timer);
      if (msg.error) w.reject(new RpcError(msg.error.code, msg.error.raw || msg.error.message));
      else w.resolve(msg.data);
    }
  }

  setState(state) {
    if (state === this.state) return;
    this.state = state;
    this.handlers.onState(state);
  }

  onSubscribed(ctx) {
    this.subscribed = ctx;
    const pos = ctx.streamPosition || {};
    this.position = { offset: pos.offset, epoch: pos.epoch };
    this.handlers.onSubscribed(ctx);
  }

  rpc(method, data) {
    if (this.real) return this.real.rpc(method, data);
    return new Promise((resolve, reject) => {
      const id = uuid();
      const timer = setTimeout(() => { this.waiting.delete(id); reject(new RpcError(0, 'the leading tab did not answer')); }, RPC_TIMEOUT_MS);
      this.waiting.set(id, { resolve, reject, timer });
      this.channel.postMessage({ t: 'rpc', id, from: this.id, method, data });
    });
  }

  stop() {
    this.stopped = true;
    this.abort.abort();
    for (const w of this.waiting.values()) { clearTimeout(w.timer); w.reject(new RpcError(0, 'rtc-agent was destroyed')); }
    this.waiting.clear();
    if (this.real) this.real.stop();
    if (this.releaseLock) this.releaseLock();
    if (this.channel) this.channel.close();
  }
}

// RpcError keeps only the head of the server's message; the follower rebuilds it whole.
function rawMessage(err) {
  if (!err) return '';
  const details = err.details && Object.keys(err.details).length ? ` | ${JSON.stringify(err.details)}` : '';
  return `${err.message}${details}`;
}
