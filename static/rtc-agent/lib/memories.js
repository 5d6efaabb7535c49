// The user's memories over the owner-only HTTP API (docs/widget.md, "Context and memory"):
//   GET    /api/memories?q=&category=&importance=&cursor=&limit=  -> {items, next_cursor}
//   PATCH  /api/memories/<id> {content?, category?, importance?}  -> the item
//   DELETE /api/memories/<id>                                    -> 204
//   GET    /api/memories/export                                  -> a JSON file
//   GET    /api/sessions/<id>/memories                           -> {items} (the session memory)
// State lives in the store: `sessionMemories[sid]` ({notes, saved, status, error}: the session's
// memory entries, and the user memories saved while in it) feeds the open session's list, `memoryPage` ({filters, items, next, status, error}) the memories page. A
// session's list is fetched when the session is opened, again when a memory tool's result shows
// up in it (the agent saved or deleted one), when one of its turns ends (the background
// extraction runs after turns) and when the list is opened. Answers that arrive after a newer
// request was made are dropped, so a fast typist never sees an older search win.

export const USER_CATEGORIES = ['user', 'feedback', 'project', 'reference'];
export const SESSION_CATEGORIES = ['decision', 'context', 'progress', 'issue', 'learnings'];
export const IMPORTANCE = ['low', 'medium', 'high', 'critical'];
const PAGE_SIZE = 50;
const SCAN_PAGE = 200; // the API's largest page ...
const SCAN_PAGES = 5; // ... and a user keeps at most 1,000 memories
const REFRESH_DELAY = 250; // ms: a burst of tool results (replayed after a reload) is one fetch

// The agent's memory tools (saveMemory, deleteMemory, …): any tool whose name says "memory".
export const isMemoryTool = (name) => /memory/i.test(String(name || ''));

export class Memories {
  constructor({ store, fetchApi }) {
    this.store = store;
    this.fetchApi = fetchApi;
    this.timers = new Map(); // session id -> pending refresh
    this.sessionGen = new Map(); // session id -> number of the latest request
    this.pageGen = 0;
    this.shownSession = null;
    store.subscribe((state) => {
      if (state.currentSession === this.shownSession) return;
      this.shownSession = state.currentSession;
      if (state.currentSession) this.refreshSession(state.currentSession, 0);
    });
    store.watch('messages', (m, old) => {
      const { type, data } = m.content || {};
      if (type !== 'toolcall_output' || !data || !isMemoryTool(data.tool_name)) return;
      if (old && old.content && old.content.type === type) return; // seen already
      if (m.session_id === store.state.currentSession) this.refreshSession(m.session_id);
    });
    store.watch('sessions', (s, old) => {
      if (old && old.status === 'active' && s.status !== 'active' && s.id === store.state.currentSession) this.refreshSession(s.id);
    });
  }

  // destroy(): no refresh pending.
  stop() { for (const t of this.timers.values()) clearTimeout(t); this.timers.clear(); }

  // --- the session's memories ------------------------------------------------------------------
  refreshSession(sid, delay = REFRESH_DELAY) {
    clearTimeout(this.timers.get(sid));
    this.timers.set(sid, setTimeout(() => { this.timers.delete(sid); this.loadSession(sid); }, delay));
  }

  async loadSession(sid) {
    const gen = (this.sessionGen.get(sid) || 0) + 1;
    this.sessionGen.set(sid, gen);
    const table = this.store.state.sessionMemories;
    table[sid] = { notes: [], saved: [], ...table[sid], status: 'loading', error: '' };
    this.store.changed();
    try {
      const [notes, saved] = await Promise.all([
        this.fetchApi(`/api/sessions/${encodeURIComponent(sid)}/memories`).then((r) => r.json()),
        this.savedIn(sid),
      ]);
      if (this.sessionGen.get(sid) !== gen) return;
      table[sid] = { notes: Array.isArray(notes.items) ? notes.items : [], saved, status: 'ready', error: '' };
    } catch (err) {
      if (this.sessionGen.get(sid) !== gen) return;
      table[sid] = { ...table[sid], status: 'error', error: err.message };
    }
    this.store.changed();
  }

  // The user memories saved while in session `sid` (the API's `session_id` filter), read to the
  // end (a user keeps at most 1,000 memories).
  async savedIn(sid) {
    const out = [];
    let cursor = '';
    for (let i = 0; i < SCAN_PAGES; i++) {
      const params = new URLSearchParams({ session_id: sid, limit: String(SCAN_PAGE) });
      if (cursor) params.set('cursor', cursor);
      const body = await (await this.fetchApi(`/api/memories?${params}`)).json();
      out.push(...(body.items || []));
      cursor = body.next_cursor;
      if (!cursor) break;
    }
    return out;
  }

  // --- the memories page ---------------------------------------------------------------------
  // Opened again, the page runs its last search again: the agent may have saved more since.
  openPage() {
    const last = this.store.state.memoryPage;
    this.store.set({ page: 'memories' });
    this.search(last ? last.filters : {});
  }

  closePage() { this.store.set({ page: 'chat' }); }

  // A new search: the first page of the user's memories matching `q`, `category`, `importance`.
  async search(filters) {
    const clean = { q: String(filters.q || '').trim(), category: filters.category || '', importance: filters.importance || '' };
    this.store.set({ memoryPage: { filters: clean, items: [], next: null, status: 'loading', error: '' } });
    await this.fetchPage(clean, null);
  }

  // The next page of the same search, appended.
  async more() {
    const page = this.store.state.memoryPage;
    if (!page || !page.next || page.status === 'loading') return;
    page.status = 'loading';
    this.store.changed();
    await this.fetchPage(page.filters, page.next);
  }

  // After a failure: the same request again (the first page, or the next one).
  async retry() {
    const page = this.store.state.memoryPage;
    if (!page || page.status === 'loading') return;
    Object.assign(page, { status: 'loading', error: '' });
    this.store.changed();
    await this.fetchPage(page.filters, page.next);
  }

  async fetchPage(filters, cursor) {
    const gen = ++this.pageGen;
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    for (const key of ['q', 'category', 'importance']) if (filters[key]) params.set(key, filters[key]);
    if (cursor) params.set('cursor', cursor);
    const page = this.store.state.memoryPage;
    try {
      const res = await this.fetchApi(`/api/memories?${params}`);
      const body = await res.json();
      if (gen !== this.pageGen) return;
      const known = new Set(page.items.map((m) => String(m.id)));
      page.items = page.items.concat((body.items || []).filter((m) => !known.has(String(m.id))));
      page.next = body.next_cursor || null;
      page.status = 'ready';
      page.error = '';
    } catch (err) {
      if (gen !== this.pageGen) return;
      page.status = 'error';
      page.error = err.message;
    }
    this.store.changed();
  }

  // Save an edit; resolves to the stored item, throws the server's refusal (nothing changed).
  async update(id, patch) {
    const res = await this.fetchApi(`/api/memories/${encodeURIComponent(id)}`, { method: 'PATCH', body: patch });
    const item = await res.json();
    const page = this.store.state.memoryPage;
    if (page) page.items = page.items.map((m) => (String(m.id) === String(item.id) ? item : m));
    this.afterChange();
    return item;
  }

  async remove(id) {
    await this.fetchApi(`/api/memories/${encodeURIComponent(id)}`, { method: 'DELETE' });
    const page = this.store.state.memoryPage;
    if (page) page.items = page.items.filter((m) => String(m.id) !== String(id));
    this.afterChange();
  }

  afterChange() {
    this.store.changed();
    const sid = this.store.state.currentSession;
    if (sid) this.refreshSession(sid, 0);
  }

  // All the user's memories as a JSON file: {blob, filename} (the server's name if it gives one).
  async exportFile() {
    const res = await this.fetchApi('/api/memories/export');
    const blob = await res.blob();
    const disposition = res.headers.get('Content-Disposition') || '';
    const named = /filename\*?=(?:UTF-8'')?"?([^";]+)"?/i.exec(disposition);
    const filename = named ? decodeURIComponent(named[1]) : `memories-${new Date().toISOString().slice(0, 10)}.json`;
    return { blob, filename };
  }
}
