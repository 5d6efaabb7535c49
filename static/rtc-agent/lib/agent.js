// The widget's controller: wires the connection, state sync, VFS, tools, outbox and executor
// for one server and one user, and offers the actions the views call. No DOM here.
import { Db } from './idb.js';
import { deviceId, jwtClaims, uuid } from './ids.js';
import { Store } from './store.js';
import { Connection } from './connection.js';
import { SharedConnection, canShare } from './tabs.js';
import { Sync } from './sync.js';
import { Vfs } from './vfs.js';
import { makeFileTools, ReadLog } from './tools.js';
import { Outbox } from './outbox.js';
import { Executor } from './executor.js';
import { runScript } from './sandbox.js';
import { docPath, functionDoc, indexDoc, invoke } from './functions.js';
import { Uploads } from './uploads.js';
import { Memories } from './memories.js';
import { Tasks } from './tasks.js';
import { Voice } from './voice.js';
import { composeAgentPrompt, readAgentMd } from './agent-prompt.js';

export const WORK_MODES = ['manual', 'edit', 'plan', 'auto', 'bypass'];

export class Agent {
  // `getAgentPrompt()` answers the page's agent prompt (the element's `agent-prompt` attribute or
  // `agentPrompt` property), read when a message creates a session. `auth` is lib/auth.js's Auth
  // (or, for older callers, `getToken({deviceId})`). `emit(name, detail)` tells the element's
  // events (lib/events.js); `functions()` lists the page's functions (lib/functions.js);
  // `beforeSend(text)` may cancel (null) or rewrite a message; `dbPrefix` names the IndexedDB
  // database `<prefix>-<user id>` (the `database-name` attribute).
  constructor({ server, auth = null, getToken = null, getAgentPrompt = () => '', emit = () => {},
    functions = () => [], beforeSend = null, dbPrefix = '', shareConnection = false }) {
    this.server = new URL(server || location.origin, location.href).origin;
    this.deviceId = deviceId();
    this.auth = auth || { token: () => getToken({ deviceId: this.deviceId }), abort() {} };
    this.getToken = () => this.auth.token();
    this.getAgentPrompt = getAgentPrompt;
    this.emit = emit;
    this.functions = functions;
    this.beforeSend = beforeSend;
    this.dbPrefix = dbPrefix;
    this.shareConnection = shareConnection && canShare(); // one socket for the tabs (lib/tabs.js)
    this.stopped = false;
    this.store = new Store();
    // The composer's attachments on their way to the store (presigned PUTs): see lib/uploads.js.
    this.uploads = new Uploads({
      store: this.store, server: this.server,
      userId: () => this.store.state.user,
      getToken: () => this.getToken(),
      limits: () => this.conn && this.conn.limits,
    });
    // The user's memories over the owner-only HTTP API: see lib/memories.js.
    this.memories = new Memories({ store: this.store, fetchApi: (path, opts) => this.fetchApi(path, opts) });
    // Goals, loops, sub-agent trees and the composer's /commands: see lib/tasks.js.
    this.tasks = new Tasks({ agent: this, store: this.store });
    // Live voice calls (the call button, views/call-panel.js): see lib/voice.js.
    this.voice = new Voice({ agent: this, store: this.store });
  }

  async start() {
    const token = await this.getToken();
    if (!token) throw new Error('getToken returned no token');
    if (this.stopped) return;
    const userId = String(jwtClaims(token).sub);
    this.prefsKey = `rtc-agent:${new URL(this.server).host}:${userId}`;
    const prefs = JSON.parse(localStorage.getItem(this.prefsKey) || '{}');
    this.db = await Db.open(this.dbPrefix ? `${this.dbPrefix}-${userId}` : this.prefsKey);
    if (this.stopped) { this.db.close(); return; }
    this.vfs = new Vfs(this.db);
    this.tools = makeFileTools(this.vfs, new ReadLog(this.db));
    const ConnectionClass = this.shareConnection ? SharedConnection : Connection;
    this.conn = new ConnectionClass({
      name: `rtc-agent-tabs:${this.prefsKey}`,
      server: this.server,
      getToken: () => this.auth.token({ force: true }),
      onState: (s) => this.onState(s),
      onSubscribed: (ctx) => this.sync.onSubscribed(ctx).then(() => this.executor.scan()).catch((e) => this.fail(e)),
      onTopic: (ctx) => this.sync.onTopic(ctx),
      onLive: (ctx) => this.sync.onLive(ctx),
    });
    this.outbox = new Outbox({ db: this.db, conn: this.conn, server: this.server, onChange: () => this.refreshOutbox() });
    this.executor = new Executor({
      store: this.store, db: this.db, conn: this.conn, outbox: this.outbox, deviceId: this.deviceId,
      runTool: (name, params, ctx) => this.runTool(name, params, ctx),
    });
    this.store.watch('sessions', (session, old) => this.executor.onSession(session, old));
    this.sync = new Sync({ store: this.store, db: this.db, conn: this.conn, onRtc: (r) => this.executor.onRtc(r), tasks: this.tasks,
      onLiveEntity: (kind, entity, old) => this.onLiveEntity(kind, entity, old),
      onLiveEvent: (data) => this.voice.onLive(data) });
    const position = await this.sync.restore();
    this.store.set({ user: userId, workMode: WORK_MODES.includes(prefs.workMode) ? prefs.workMode : 'edit', currentSession: prefs.session || null });
    this.conn.start({ token, topic: `topic:u=${userId}`, position });
    // Channels of a call an earlier page left on the line are hung up (it hands the call back).
    this.voice.sweep().catch((err) => console.warn('rtc-agent: voice channels left over', err.message || err));
    // The outbox is drained before anything else runs: a finished result goes out first.
    await this.outbox.drain();
    this.executor.ready = true;
    this.executor.scan();
    await this.writeFunctionDocs();
    this.vfs.onChange(() => this.refreshFiles());
    this.refreshFiles();
    this.refreshOutbox();
  }

  onState(s) {
    if (this.stopped) return;
    const was = this.store.state.connection;
    this.store.set({ connection: s });
    if (s !== was) this.emit('connectionStateChange', { state: s, previous: was });
    if (s === 'connected') this.outbox.drain();
  }

  // An entity that arrived live (topic or an action's answer, not a reload): messages the
  // agent finished are the `messageReceived` event.
  onLiveEntity(kind, entity, old) {
    if (kind !== 'messages' || entity.role !== 'assistant' || entity.streaming_status !== 'completed') return;
    if (old && old.streaming_status === 'completed') return;
    this.emit('messageReceived', { message: entity });
  }

  // The page's functions documented in the VFS for the agent (/functions/INDEX.md and one file
  // each); written at start and again, shortly after, whenever the registrations change.
  async writeFunctionDocs() {
    if (!this.vfs || this.stopped) return;
    const fns = this.functions();
    for (const fn of fns) await this.vfs.write(docPath(fn), functionDoc(fn));
    if (fns.length) await this.vfs.write('/functions/INDEX.md', indexDoc(fns, this.functionGroups ? this.functionGroups() : new Map()));
  }

  functionsChanged() {
    clearTimeout(this._docsTimer);
    this._docsTimer = setTimeout(() => this.writeFunctionDocs().catch((e) => console.warn('rtc-agent: function docs', e)), 50);
  }

  findFunction(name) {
    return this.functions().find((fn) => fn.tool === name || fn.path === name) || null;
  }

  // A page function run for the agent (an RTC) or from a script, validated first.
  callFunction(fn, params, log = null) {
    return invoke(fn, params, { emit: (name, detail) => this.emit(name, detail), log });
  }

  // Tear everything down (the element's destroy()): the socket (and its listeners), timers,
  // pending token requests, uploads, the database. The agent cannot start again.
  destroy() {
    this.stopped = true;
    this.auth.abort();
    clearTimeout(this._docsTimer);
    this.voice.destroy();
    if (this.conn) this.conn.stop();
    if (this.outbox) this.outbox.stop();
    if (this.sync) this.sync.stop();
    if (this.uploads && this.uploads.stop) this.uploads.stop();
    if (this.memories && this.memories.stop) this.memories.stop();
    if (this.vfs && this.vfs.stop) this.vfs.stop();
    this.store.listeners.clear();
    this.store.watchers.clear();
    if (this.db) this.db.close();
  }

  fail(err) { console.error('rtc-agent:', err); this.store.set({ error: String(err.message || err) }); }

  savePrefs(patch) {
    const prefs = { ...JSON.parse(localStorage.getItem(this.prefsKey) || '{}'), ...patch };
    localStorage.setItem(this.prefsKey, JSON.stringify(prefs));
  }

  async refreshFiles() { this.store.set({ files: (await this.vfs.list()).sort((a, b) => a.path.localeCompare(b.path)) }); }
  async refreshOutbox() { this.store.set({ outbox: await this.outbox.pending() }); }

  // --- tools ---------------------------------------------------------------------------------
  async runTool(name, params, ctx) {
    if (this.tools[name]) return this.tools[name](params, ctx);
    if (name === 'script') return this.script(params, ctx);
    const fn = this.findFunction(name);
    if (fn) return this.callFunction(fn, params);
    throw new Error(`unknown tool: ${name}`);
  }

  async script({ action = 'eval', code, name, params }, ctx) {
    const safeName = (n) => String(n || '').replace(/[^\w.-]/g, '-');
    if (action === 'save') {
      if (!name || !code) throw new Error('save needs name and code');
      await this.vfs.write(`/scripts/${safeName(name)}.js`, code);
      return `saved /scripts/${safeName(name)}.js`;
    }
    if (action === 'run') code = await this.vfs.readText(`/scripts/${safeName(name)}.js`);
    else if (action !== 'eval') throw new Error(`unknown action: ${action}`);
    return runScript({ code, params, handleCall: (op, args) => this.scriptCall(op, args, ctx) });
  }

  scriptCall(op, args, ctx) {
    const fs = { 'fs.read': () => this.vfs.readText(args.path), 'fs.write': () => this.tools.write(args, ctx),
      'fs.list': () => this.tools.ls(args), 'fs.edit': () => this.tools.edit(args, ctx),
      'fs.grep': () => this.tools.grep(args), 'fs.find': () => this.tools.find(args) };
    if (Object.hasOwn(fs, op)) return fs[op](); // never an inherited name (valueOf, constructor)
    if (op === 'callFunction') {
      const fn = this.findFunction(args.name);
      if (!fn) throw new Error(`no such function: ${args.name}`);
      return this.callFunction(fn, args.args);
    }
    throw new Error(`unknown call: ${op}`);
  }

  // --- actions -------------------------------------------------------------------------------
  async selectSession(id) {
    const changed = id !== this.store.state.currentSession;
    if (changed) this.store.state.commandNotice = null;
    this.store.set({ currentSession: id });
    if (changed) this.emit('sessionSwitched', { id });
    this.savePrefs({ session: id });
    if (id) await this.sync.loadSession(id).catch((e) => this.fail(e));
  }

  setWorkMode(mode) {
    if (!WORK_MODES.includes(mode)) return;
    this.store.set({ workMode: mode });
    this.savePrefs({ workMode: mode });
    const sid = this.store.state.currentSession;
    if (sid) this.conn.rpc('v1.session.update', { session_id: sid, work_mode: mode }).catch((e) => this.fail(e));
  }

  // `files` are the finished uploads as api.yaml's FileAttachment ({fileid, mimetype, extra});
  // a retry sends the same files with the same client_id. A message that creates its session
  // carries the agent prompt (lib/agent-prompt.js), composed once, so a retry sends the same.
  // -> the session's id, or null when the send failed.
  // The page's `rtc-before-message-send` (cancel: null; else the text, maybe rewritten).
  async checkSend(text) {
    if (!this.beforeSend) return text;
    const out = await this.beforeSend(text);
    return out === null ? null : out.content;
  }

  // `checked`: the composer already asked checkSend.
  async send(text, retryOf = null, files = [], { checked = false } = {}) {
    const s = this.store.state;
    if (!retryOf && !checked) {
      text = await this.checkSend(text);
      if (text === null) return null;
    }
    const pending = retryOf || { client_id: uuid(), text, files, session: s.currentSession,
      client_session_id: `${this.deviceId}:${uuid()}`, failed: false };
    if (!pending.session && pending.agent_prompt === undefined) {
      pending.agent_prompt = composeAgentPrompt(this.getAgentPrompt(), await readAgentMd(this.vfs));
    }
    s.sending = { ...pending, failed: false };
    this.store.changed();
    const data = { text: pending.text };
    if (pending.files && pending.files.length) data.files = pending.files;
    try {
      const res = await this.conn.rpc('v1.message.send', {
        content_data: { type: 'user_message', data },
        client_id: pending.client_id,
        client_session_id: pending.client_session_id,
        server_session_id: pending.session || '',
        work_mode: s.workMode,
        ...(pending.agent_prompt ? { agent_prompt: pending.agent_prompt } : {}),
        // The page's registered functions are offered to the model as tools of their own.
        host_functions: this.functions().map(({ tool, path, description, parameters, class: klass }) =>
          ({ name: tool, description: tool === path ? description : `${path}: ${description}`, parameters, class: klass })),
      });
      s.sending = null;
      const sid = res.result.session_id;
      this.emit('messageSent', { message: { content: pending.text, files: pending.files || [], session_id: sid,
        client_id: pending.client_id, message_id: res.result.message_id || null } });
      if (!pending.session) this.emit('sessionCreated', { session: this.store.state.sessions[sid] || { id: sid } });
      await this.selectSession(sid);
      return sid;
    } catch (err) {
      if (err.slug === 'client_id_conflict' && err.details.session_id) {
        s.sending = null;
        await this.selectSession(err.details.session_id);
        return err.details.session_id;
      }
      s.sending = { ...pending, failed: true, error: err.message };
      this.store.changed();
      return null;
    }
  }

  // What creates a session for an action other than a message (a /goal or /loop typed in a new
  // conversation): the same fields a creating v1.message.send carries.
  async newSessionParams() {
    const prompt = composeAgentPrompt(this.getAgentPrompt(), await readAgentMd(this.vfs));
    return { client_session_id: `${this.deviceId}:${uuid()}`, work_mode: this.store.state.workMode,
      ...(prompt ? { agent_prompt: prompt } : {}) };
  }

  retrySend() { if (this.store.state.sending) this.send(null, this.store.state.sending); }

  // Retry after a turn error: send the session's last user message again (a new message), with
  // its attachments.
  retryTurn(sessionId) {
    const last = this.store.sessionMessages(sessionId).filter((m) => m.role === 'user').pop();
    if (!last) return;
    this.store.set({ currentSession: sessionId });
    const data = last.content.data || {};
    this.send(data.text || '', null, Array.isArray(data.files) ? data.files : []);
  }

  // GET a path of the agent's own server with the access token (attachment thumbnails) -> a
  // Blob. The token goes to that server only, whatever an entity's URL says.
  async fetchBlob(path) {
    const url = new URL(path, this.server);
    if (url.origin !== this.server) throw new Error(`not the agent's server: ${url.origin}`);
    const token = await this.getToken();
    const res = await fetch(url.toString(), { headers: { Authorization: `Bearer ${token}` } });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    return res.blob();
  }

  // A call to the agent's own HTTP API with the access token -> the Response (2xx only). A
  // refusal throws an Error with the server's message (`{code, message}` or DRF's `detail`)
  // and `status`.
  async fetchApi(path, { method = 'GET', body } = {}) {
    const url = new URL(path, this.server);
    if (url.origin !== this.server) throw new Error(`not the agent's server: ${url.origin}`);
    const token = await this.getToken();
    const headers = { Authorization: `Bearer ${token}`, Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(url.toString(), { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    if (res.ok) return res;
    const data = await res.json().catch(() => null);
    const err = new Error(apiMessage(data) || `HTTP ${res.status}`);
    err.status = res.status;
    err.code = data && typeof data.code === 'string' ? data.code : '';
    throw err;
  }

  stop(sessionId) { return this.act('v1.turn.stop', { session_id: sessionId, client_id: uuid() }); }
  async rename(id, title) {
    const res = await this.act('v1.session.update', { session_id: id, title });
    if (res) this.emit('sessionRenamed', { id, title });
    return res;
  }
  archive(id) { return this.act('v1.session.close', { session_id: id, client_id: uuid() }); }
  unarchive(id) { return this.act('v1.session.open', { session_id: id }); }
  compact(id) { return this.act('v1.session.compact', { session_id: id }); }

  async remove(id) {
    const res = await this.act('v1.session.update', { session_id: id, deleted_at: new Date().toISOString() });
    if (res) this.emit('sessionDeleted', { id });
    if (this.store.state.currentSession === id) this.selectSession(null);
  }

  async fork(sessionId, messageId, text) {
    const res = await this.act('v1.session.fork', {
      old_server_session_id: sessionId, old_server_message_id: messageId,
      new_client_session_id: `${this.deviceId}:${uuid()}`, new_client_message_id: uuid(),
      content_data: { type: 'user_message', data: { text } },
    });
    if (res) {
      this.emit('sessionCreated', { session: this.store.state.sessions[res.result.session_id] || { id: res.result.session_id }, forkedFrom: sessionId });
      await this.selectSession(res.result.session_id);
    }
  }

  async act(method, data) {
    try {
      const res = await this.conn.rpc(method, data);
      if (res && Array.isArray(res.updates)) res.updates.forEach((u) => this.sync.apply(u));
      return res;
    } catch (err) { this.fail(err); return null; }
  }
}

// The words of an /api/ refusal: `{code, message, details}` (a validation error's first field
// added), DRF's `{detail}`, or DRF's `{field: ["…"]}`.
function apiMessage(data) {
  if (!data || typeof data !== 'object') return '';
  const fieldError = (obj) => {
    for (const [field, value] of Object.entries(obj || {})) {
      const first = Array.isArray(value) ? value[0] : null;
      if (typeof first === 'string') return field === 'non_field_errors' ? first : `${field}: ${first}`;
    }
    return '';
  };
  if (typeof data.message === 'string' && data.message) {
    const extra = data.details && typeof data.details === 'object' ? fieldError(data.details) : '';
    return extra ? `${data.message}: ${extra}` : data.message;
  }
  if (typeof data.detail === 'string' && data.detail) return data.detail;
  return fieldError(data);
}
