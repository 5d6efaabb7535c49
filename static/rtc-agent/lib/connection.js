// The realtime connection: the official centrifuge-js client on /connection/websocket.
// Tokens come from the host's getToken callback (initially and whenever the server asks for a
// refresh). Recovery across page reloads: centrifuge-js keeps the position of server-side
// subscriptions only in memory, so we seed its internal `_serverSubs` table with the offset and
// epoch stored in IndexedDB before connecting; it then sends `subs: {recover, offset, epoch}` in
// `connect`, exactly as it does on its own reconnects. (No public API exists for this in 5.7.)
import { Centrifuge } from '../vendor/centrifuge.mjs';

export class RpcError extends Error {
  constructor(code, message) {
    const [head, json] = String(message || '').split(' | ');
    super(head);
    this.code = code;
    this.slug = head.split(':')[0];
    try { this.details = json ? JSON.parse(json) : {}; } catch { this.details = {}; }
  }
  get temporary() { return !this.code || this.code < 400 || this.code === 429 || this.code >= 500 && this.code < 600; }
}

export function wsUrl(server) {
  const u = new URL(server || location.origin, location.href);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  u.pathname = u.pathname.replace(/\/$/, '') + '/connection/websocket';
  return u.toString();
}

export class Connection {
  constructor({ server, getToken, onState, onSubscribed, onTopic, onLive }) {
    this.server = server;
    this._getToken = getToken;
    this.token = '';
    this.handlers = { onState, onSubscribed, onTopic, onLive };
    this.client = null;
    // The server's limits (connect reply `data.limits`); the defaults are the server's own.
    this.limits = { max_frame_bytes: 4 * 1024 * 1024, max_result_bytes: 2 * 1024 * 1024 };
  }

  async token_() {
    if (this.stopped) throw new Error('rtc-agent was destroyed');
    this.token = await this._getToken();
    return this.token;
  }

  start({ token, topic, position }) {
    this.token = token;
    this.topic = topic;
    const client = new Centrifuge(wsUrl(this.server), {
      token,
      getToken: () => this.token_(),
      minReconnectDelay: 500,
      maxReconnectDelay: 20000,
      timeout: 10000,
    });
    if (position && position.epoch) {
      client._serverSubs[topic] = { offset: position.offset, epoch: position.epoch, recoverable: true };
    }
    const state = (s) => this.handlers.onState(s);
    client.on('connecting', () => state('connecting'));
    client.on('connected', (ctx) => {
      if (ctx && ctx.data && ctx.data.limits) this.limits = ctx.data.limits;
      state('connected');
    });
    client.on('disconnected', () => state('disconnected'));
    client.on('subscribed', (ctx) => { if (ctx.channel === topic) this.handlers.onSubscribed(ctx); });
    client.on('publication', (ctx) => {
      if (ctx.channel === topic) this.handlers.onTopic(ctx);
      else this.handlers.onLive(ctx);
    });
    this.client = client;
    client.connect();
  }

  get connected() { return this.client && this.client.state === 'connected'; }

  async rpc(method, data) {
    try {
      return (await this.client.rpc(method, data)).data;
    } catch (err) {
      throw new RpcError(err && err.code, (err && err.message) || String(err));
    }
  }

  // For good (destroy): the socket closed, centrifuge-js's listeners and timers gone.
  stop() {
    this.stopped = true;
    if (!this.client) return;
    this.client.removeAllListeners();
    this.client.disconnect();
  }
}
