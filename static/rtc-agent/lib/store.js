// A small observable store: entities by id plus UI state; views subscribe and re-render.
// `files` is the VFS listing; `fileEntities` the attachments the server processed (the `file`
// entity, by id); `uploads` the composer's attachments on their way (lib/uploads.js) and
// `previews` the local object URLs of sent images, by key, until their thumbnails arrive.
// `sessionMemories` (by session id) and `memoryPage` are the memories fetched over HTTP
// (lib/memories.js); `page` is what the panel shows: 'chat' or 'memories'.
// `goals` and `loops` are the sessions' goal and loop entities (lib/tasks.js), by id;
// `commandNotice` ({text, kind: 'info'|'error'}) answers a /command typed in the composer.
// `call` is the voice call (lib/voice.js; null: none shown): its status, channels and transcript.
export class Store {
  constructor() {
    this.state = {
      connection: 'disconnected', user: null, sessions: {}, messages: {}, rtcs: {}, streams: {},
      loaded: {}, currentSession: null, workMode: 'edit', view: 'normal', error: '', files: [],
      fileEntities: {}, uploads: [], uploadNotice: '', previews: {},
      sessionMemories: {}, memoryPage: null, page: 'chat',
      goals: {}, loops: {}, commandNotice: null, call: null,
    };
    this.listeners = new Set();
    this.watchers = new Map(); // kind -> Set of fn(entity, old): called for every upsert
    this._queued = false;
  }

  subscribe(fn) { this.listeners.add(fn); fn(this.state); return () => this.listeners.delete(fn); }

  set(patch) { Object.assign(this.state, patch); this.changed(); }

  // Be told of each entity of one kind as it arrives (with the copy it replaces, if any).
  watch(kind, fn) {
    if (!this.watchers.has(kind)) this.watchers.set(kind, new Set());
    this.watchers.get(kind).add(fn);
    return () => this.watchers.get(kind).delete(fn);
  }

  // Batch notifications into one microtask: chunk bursts re-render once.
  changed() {
    if (this._queued) return;
    this._queued = true;
    queueMicrotask(() => { this._queued = false; for (const fn of this.listeners) fn(this.state); });
  }

  upsert(kind, entity) {
    const table = this.state[kind];
    const old = table[entity.id];
    // Never let an older copy (replayed or reloaded) overwrite a newer one.
    if (old && old.updated_at && entity.updated_at && old.updated_at > entity.updated_at) return;
    table[entity.id] = entity;
    if (kind === 'messages' && entity.streaming_status !== 'streaming') delete this.state.streams[entity.id];
    for (const fn of this.watchers.get(kind) || []) fn(entity, old);
    this.changed();
  }

  sessionMessages(sessionId) {
    return Object.values(this.state.messages)
      .filter((m) => m.session_id === sessionId && !m.deleted_at)
      .sort((a, b) => a.global_offset - b.global_offset);
  }

  sessionRtcs(sessionId) {
    return Object.values(this.state.rtcs).filter((r) => r.session_id === sessionId);
  }

  // The processed attachments of one message, by object key.
  messageFiles(messageId) {
    const out = {};
    for (const f of Object.values(this.state.fileEntities)) if (f.message_id === messageId) out[f.fileid] = f;
    return out;
  }

  // The session list: root sessions only (a sub-agent's session shows in its parent's
  // conversation, under the message that started it).
  visibleSessions() {
    return Object.values(this.state.sessions)
      .filter((s) => !s.deleted_at && !s.parent_server_session_id)
      .sort((a, b) => (b.updated_at || '').localeCompare(a.updated_at || ''));
  }

  // The sub-agent sessions a session started, oldest first.
  childSessions(sessionId) {
    return Object.values(this.state.sessions)
      .filter((s) => !s.deleted_at && s.parent_server_session_id === sessionId)
      .sort((a, b) => (a.created_at || '').localeCompare(b.created_at || ''));
  }

  // The session's goal to show: the active one, else the latest that ended (null: none yet).
  sessionGoal(sessionId) {
    const goals = Object.values(this.state.goals).filter((g) => g.session_id === sessionId);
    return goals.find((g) => g.status === 'active')
      || goals.sort((a, b) => (b.created_at || '').localeCompare(a.created_at || ''))[0] || null;
  }

  // The session's loops: active ones first (soonest run first), then those that ended, newest first.
  sessionLoops(sessionId) {
    const loops = Object.values(this.state.loops).filter((l) => l.session_id === sessionId);
    const active = loops.filter((l) => l.status === 'active')
      .sort((a, b) => (a.next_run_at || '').localeCompare(b.next_run_at || ''));
    const ended = loops.filter((l) => l.status !== 'active')
      .sort((a, b) => (b.updated_at || '').localeCompare(a.updated_at || ''));
    return [...active, ...ended];
  }
}
