// 100 % delivery of tool results. A result is written to IndexedDB before the first attempt and
// removed only when the server acknowledged it (a duplicate answer counts: the server already
// holds it). Attempts go over the socket when it is up, else over POST /api/rtc/<id>/result,
// always with the same client_id, retried with backoff 1, 2, 4 ... 30 s, forever. Only refusals
// that can never succeed (the RTC is gone or not ours) drop an entry.
const PERMANENT = new Set(['rtc.not_found', 'permission_denied', 'invalid_request']);

// A result larger than the server keeps (connect reply `data.limits.max_result_bytes`) would be
// refused, or its frame dropped, on every attempt: send once an error the model can act on.
export function fitResult(body, limits) {
  const max = limits && limits.max_result_bytes;
  if (!max || !body || !body.success) return body;
  const size = new TextEncoder().encode(JSON.stringify(body.result ?? null)).length;
  if (size <= max) return body;
  return {
    success: false,
    result: null,
    error: `the tool's result was ${size} bytes, over the limit of ${max} bytes; ` +
      'ask for a smaller part (a range of lines, a narrower search, a summary)',
    client_id: body.client_id,
  };
}

export class Outbox {
  constructor({ db, conn, server, onChange }) {
    this.db = db;
    this.conn = conn;
    this.server = server;
    this.onChange = onChange || (() => {});
    this.timers = new Map();
    this.busy = new Set();
    this.paused = false; // tests and diagnostics: hold deliveries without losing them
  }

  async add(rtcId, body) {
    const entry = { rtc_id: rtcId, body, attempts: 0, created: Date.now() };
    await this.db.put('outbox', entry);
    this.onChange();
    this.deliver(rtcId);
  }

  pending() { return this.db.all('outbox'); }

  async has(rtcId) { return !!(await this.db.get('outbox', rtcId)); }

  // Deliver everything stored (page load, reconnect); each entry keeps its own backoff.
  async drain() {
    for (const entry of await this.pending()) await this.deliver(entry.rtc_id);
  }

  async deliver(rtcId) {
    if (this.busy.has(rtcId)) return;
    clearTimeout(this.timers.get(rtcId));
    this.timers.delete(rtcId);
    const entry = await this.db.get('outbox', rtcId);
    if (!entry) return;
    if (this.paused) return this._retry(entry);
    this.busy.add(rtcId);
    try {
      await this._send(entry);
      await this.db.del('outbox', rtcId);
      this.onChange(rtcId);
    } catch (err) {
      if (err && PERMANENT.has(err.slug)) {
        console.warn('rtc-agent: result refused for good', rtcId, err.message);
        await this.db.del('outbox', rtcId);
        this.onChange(rtcId);
      } else {
        entry.attempts += 1;
        entry.last_error = String(err && err.message || err);
        await this.db.put('outbox', entry);
        this._retry(entry);
      }
    } finally {
      this.busy.delete(rtcId);
    }
  }

  _retry(entry) {
    const delay = Math.min(30, 2 ** Math.max(0, entry.attempts - 1)) * 1000;
    this.timers.set(entry.rtc_id, setTimeout(() => this.deliver(entry.rtc_id), delay));
  }

  async _send(entry) {
    if (this.conn.connected) {
      return this.conn.rpc('v1.rtc.submit_result', { rtc_id: entry.rtc_id, ...entry.body });
    }
    const url = new URL(`api/rtc/${entry.rtc_id}/result`, this.server.replace(/\/?$/, '/'));
    let res = await this._post(url, entry.body, this.conn.token);
    if (res.status === 401) res = await this._post(url, entry.body, await this.conn.token_());
    const body = await res.json().catch(() => ({}));
    if (res.ok) return body;
    const err = new Error(body.message || `HTTP ${res.status}`);
    err.slug = res.status >= 500 ? 'http_error' : body.code;
    throw err;
  }

  _post(url, body, token) {
    return fetch(url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    });
  }

  stop() { for (const t of this.timers.values()) clearTimeout(t); this.timers.clear(); }
}
