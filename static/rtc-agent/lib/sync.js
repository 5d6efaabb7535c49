// Client state from the topic: Updates are applied by replacing entities by id; the state and
// the topic position are persisted together (one IndexedDB transaction) so that a reload can
// resume from exactly the position that matches the cached state. When the server answers
// `recovered: false` (or there is nothing stored) everything is reloaded through RPC queries.
// `file` entities are the attachments the server processed (kind, status, warning, thumbnail);
// `goal` and `loop` entities a session's goal and loops (lib/tasks.js, which also loads them,
// and a session's sub-agents, when a session is loaded).
const KINDS = { session: 'sessions', message: 'messages', rtc: 'rtcs', turn: 'turns', file: 'fileEntities', goal: 'goals', loop: 'loops' };
// The wire shape of the cached entities: a snapshot of another shape is dropped, so everything is
// reloaded (2: tool call messages carry api.yaml's {id, tool_name, input, output, status};
// 3: the snapshot keeps `file` entities; 4: and `goal` and `loop` entities).
const FORMAT = 4;
const KEPT = ['sessions', 'messages', 'rtcs', 'fileEntities', 'goals', 'loops', 'loaded'];

export class Sync {
  // `onLiveEntity(kind, entity, old)`: told of each entity applied from an Update (not reloads).
  // `onLiveEvent(data)`: the live publications that are not chunks (live calls: lib/voice.js).
  constructor({ store, db, conn, onRtc, tasks, onLiveEntity = () => {}, onLiveEvent = () => {} }) {
    this.store = store;
    this.tasks = tasks;
    this.db = db;
    this.conn = conn;
    this.onRtc = onRtc;
    this.onLiveEntity = onLiveEntity;
    this.onLiveEvent = onLiveEvent;
    this.position = null;
    this._timer = null;
    this._onPageHide = () => { if (this._timer) this.persist(); };
    addEventListener('pagehide', this._onPageHide);
  }

  // destroy(): nothing more is saved (the database closes next).
  stop() {
    removeEventListener('pagehide', this._onPageHide);
    clearTimeout(this._timer);
    this._timer = null;
    this.stopped = true;
  }

  async restore() {
    const snap = await this.db.get('kv', 'snapshot');
    if (!snap || snap.format !== FORMAT) return null;
    for (const key of KEPT) this.store.state[key] = snap.state[key] || {};
    this.position = snap.position;
    this.store.changed();
    return snap.position;
  }

  // Throttled (not debounced): a steady stream of publications still gets saved every 150 ms.
  persistSoon() {
    if (this._timer || this.stopped) return;
    this._timer = setTimeout(() => { this._timer = null; this.persist(); }, 150);
  }

  async persist() {
    const state = Object.fromEntries(KEPT.map((key) => [key, this.store.state[key]]));
    const snap = { format: FORMAT, position: this.position, state };
    await this.db.putMany([['kv', snap, 'snapshot']]);
  }

  apply(update) {
    if (!update || update.type === 'gap' || !Array.isArray(update.items)) return;
    update.items.forEach((it, i) => {
      const kind = KINDS[it.entity];
      const entity = update.data_list && update.data_list[i];
      if (!kind || !entity) return;
      if (kind === 'turns') return; // turns are not kept: sessions carry the status we show
      const old = this.store.state[kind][entity.id];
      this.store.upsert(kind, entity);
      if (this.store.state[kind][entity.id] === entity) this.onLiveEntity(kind, entity, old);
      if (kind === 'rtcs') this.onRtc(entity);
    });
  }

  onTopic(ctx) {
    this.apply(ctx.data);
    if (ctx.offset) this.position = { ...(this.position || {}), offset: ctx.offset };
    this.persistSoon();
  }

  async onSubscribed(ctx) {
    const pos = ctx.streamPosition || { offset: 0, epoch: '' };
    const fresh = !ctx.recovered;
    this.position = { offset: fresh ? pos.offset : (this.position?.offset ?? pos.offset), epoch: pos.epoch };
    if (fresh) await this.reloadAll();
    this.persistSoon();
  }

  async reloadAll() {
    const s = this.store.state;
    for (const key of KEPT) s[key] = {};
    let cursor = '';
    for (let page = 0; page < 10; page++) {
      const res = await this.conn.rpc('v1.session.list', { cursor, limit: 50 });
      res.items.forEach((x) => this.store.upsert('sessions', x));
      if (!res.next_cursor) break;
      cursor = res.next_cursor;
    }
    await this.fetchLineage(s.currentSession);
    const active = Object.values(s.sessions).filter((x) => x.status === 'active' || x.id === s.currentSession);
    for (const session of active) await this.loadSession(session.id, true);
    this.store.changed();
  }

  // `v1.session.list` lists root sessions: an open sub-agent's session, and the sessions above
  // it (for the way back), are fetched one by one.
  async fetchLineage(sessionId) {
    for (let id = sessionId, depth = 0; id && depth < 8; depth++) {
      let session = this.store.state.sessions[id];
      if (!session) {
        try { session = (await this.conn.rpc('v1.session.get', { session_id: id })).item; } catch { return; }
        if (!session) return;
        this.store.upsert('sessions', session);
      }
      id = session.parent_server_session_id;
    }
  }

  // Messages and RTCs of one session (once, or again when forced).
  async loadSession(sessionId, force = false) {
    if (!sessionId || (this.store.state.loaded[sessionId] && !force)) return;
    let cursor = null;
    for (let page = 0; page < 40; page++) {
      const res = await this.conn.rpc('v1.message.list', { session_id: sessionId, cursor, limit: 200 });
      res.items.forEach((m) => this.store.upsert('messages', m));
      if (res.next_cursor === null || res.next_cursor === undefined || !res.items.length) break;
      cursor = res.next_cursor;
    }
    let rcursor = '';
    for (let page = 0; page < 40; page++) {
      const res = await this.conn.rpc('v1.rtc.list', { session_id: sessionId, cursor: rcursor, limit: 50 });
      res.items.forEach((r) => { this.store.upsert('rtcs', r); this.onRtc(r); });
      if (!res.next_cursor) break;
      rcursor = res.next_cursor;
    }
    let fcursor = '';
    for (let page = 0; page < 40; page++) {
      const res = await this.conn.rpc('v1.file.list', { session_id: sessionId, cursor: fcursor, limit: 200 });
      res.items.forEach((f) => this.store.upsert('fileEntities', f));
      if (!res.next_cursor) break;
      fcursor = res.next_cursor;
    }
    if (this.tasks) await this.tasks.loadSession(sessionId);
    this.store.state.loaded[sessionId] = true;
    this.persistSoon();
  }

  // A live chunk: appended in seq order until the final message replaces it. Other types (a
  // live call's `live.call`, `channel.output`, `channel.output.end`, `channel.interrupt`) go to
  // `onLiveEvent`.
  onLive(ctx) {
    const c = ctx.data;
    if (!c || typeof c !== 'object') return;
    if (c.type !== 'chunk') {
      try { this.onLiveEvent(c); } catch (err) { console.error('rtc-agent: live publication', c.type, err); }
      return;
    }
    const msg = this.store.state.messages[c.message_id];
    if (msg && msg.streaming_status && msg.streaming_status !== 'streaming') return;
    const streams = this.store.state.streams;
    const s = streams[c.message_id] || (streams[c.message_id] = { text: '', seq: 0, kind: c.kind, session_id: c.session_id });
    if (c.seq <= s.seq) return;
    s.text += c.delta;
    s.seq = c.seq;
    this.store.changed();
  }
}
