// The widget's controller: wires the connection, state sync, VFS, tools, outbox and executor
// for one server and one user, and offers the actions the views call. No DOM here.
import { Db } from './idb.js';
import { deviceId, jwtClaims, uuid } from './ids.js';
import { Store } from './store.js';
import { Connection } from './connection.js';
import { Sync } from './sync.js';
import { Vfs } from './vfs.js';
import { makeFileTools, ReadLog } from './tools.js';
import { Outbox } from './outbox.js';
import { Executor } from './executor.js';
import { runScript } from './sandbox.js';
import { functions, functionDoc } from './functions.js';
import { Uploads } from './uploads.js';
import { Memories } from './memories.js';
import { Tasks } from './tasks.js';
import { composeAgentPrompt, readAgentMd } from './agent-prompt.js';

export const WORK_MODES = ['manual', 'edit', 'plan', 'auto', 'bypass'];

export class Agent {
  // `getAgentPrompt()` answers the page's agent prompt (the element's `agent-prompt` attribute or
  // `agentPrompt` property), read when a message creates a session.
  constructor({ server, getToken, getAgentPrompt = () => '' }) {
    this.server = new URL(server || location.origin, location.href).origin;
    this.getToken = getToken;
    this.getAgentPrompt = getAgentPrompt;
    this.store = new Store();
    this.deviceId = deviceId();
    // The composer's attachments on their way to the store (presigned PUTs): see lib/uploads.js.
    this.uploads = new Uploads({
      store: this.store, server: this.server,
      userId: () => this.store.state.user,
      getToken: () => this.getToken({ deviceId: this.deviceId }),
      limits: () => this.conn && this.conn.limits,
    });
    // The user's memories over the owner-only HTTP API: see lib/memories.js.
    this.memories = new Memories({ store: this.store, fetchApi: (path, opts) => this.fetchApi(path, opts) });
    // Goals, loops, sub-agent trees and the composer's /commands: see lib/tasks.js.
    this.tasks = new Tasks({ agent: this, store: this.store });
  }

  async start() {
    const token = await this.getToken({ deviceId: this.deviceId });
    if (!token) throw new Error('getToken returned no token');
    const userId = String(jwtClaims(token).sub);
    this.prefsKey = `rtc-agent:${new URL(this.server).host}:${userId}`;
    const prefs = JSON.parse(localStorage.getItem(this.prefsKey) || '{}');
    this.db = await Db.open(this.prefsKey);
    this.vfs = new Vfs(this.db);
    this.tools = makeFileTools(this.vfs, new ReadLog(this.db));
    this.conn = new Connection({
      server: this.server,
      getToken: () => this.getToken({ deviceId: this.deviceId }),
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
    this.sync = new Sync({ store: this.store, db: this.db, conn: this.conn, onRtc: (r) => this.executor.onRtc(r), tasks: this.tasks });
    const position = await this.sync.restore();
    this.store.set({ user: userId, workMode: WORK_MODES.includes(prefs.workMode) ? prefs.workMode : 'edit', currentSession: prefs.session || null });
    this.conn.start({ token, topic: `topic:u=${userId}`, position });
    // The outbox is drained before anything else runs: a finished result goes out first.
    await this.outbox.drain();
    this.executor.ready = true;
    this.executor.scan();
    for (const fn of functions.values()) await this.vfs.write(`/functions/${fn.name}.md`, functionDoc(fn));
    this.vfs.onChange(() => this.refreshFiles());
    this.refreshFiles();
    this.refreshOutbox();
  }

  onState(s) {
    this.store.set({ connection: s });
    if (s === 'connected') this.outbox.drain();
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
    const fn = functions.get(name);
    if (fn) return fn.handler(params || {});
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
      const fn = functions.get(args.name);
      if (!fn) throw new Error(`no such function: ${args.name}`);
      return fn.handler(args.args || {});
    }
    throw new Error(`unknown call: ${op}`);
  }

  // --- actions -------------------------------------------------------------------------------
  async selectSession(id) {
    if (id !== this.store.state.currentSession) this.store.state.commandNotice = null;
    this.store.set({ currentSession: id });
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
  async send(text, retryOf = null, files = []) {
    const s = this.store.state;
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
        host_functions: [...functions.values()].map(({ name, description, parameters, class: klass }) =>
          ({ name, description, parameters, class: klass })),
      });
      s.sending = null;
      await this.selectSession(res.result.session_id);
      return res.result.session_id;
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
    const token = await this.getToken({ deviceId: this.deviceId });
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
    const token = await this.getToken({ deviceId: this.deviceId });
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
  rename(id, title) { return this.act('v1.session.update', { session_id: id, title }); }
  archive(id) { return this.act('v1.session.close', { session_id: id, client_id: uuid() }); }
  unarchive(id) { return this.act('v1.session.open', { session_id: id }); }
  compact(id) { return this.act('v1.session.compact', { session_id: id }); }

  async remove(id) {
    await this.act('v1.session.update', { session_id: id, deleted_at: new Date().toISOString() });
    if (this.store.state.currentSession === id) this.selectSession(null);
  }

  async fork(sessionId, messageId, text) {
    const res = await this.act('v1.session.fork', {
      old_server_session_id: sessionId, old_server_message_id: messageId,
      new_client_session_id: `${this.deviceId}:${uuid()}`, new_client_message_id: uuid(),
      content_data: { type: 'user_message', data: { text } },
    });
    if (res) await this.selectSession(res.result.session_id);
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
