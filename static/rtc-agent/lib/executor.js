// Runs the RTCs this device owns, one at a time per RTC id, with these guarantees:
// * only the session's device runs them (session.device_id, or for sessions created without a
//   device claim, a client_session_id this device minted, or for a sub-agent's session without
//   a device, its parent's); other tabs/devices just show them;
// * one tab of the browser at a time claims and runs a call: it holds the Web Lock
//   `rtc-agent-run:<rtc id>` from its claim to its result, and a tab that finds the lock taken
//   leaves the call alone;
// * `executing` is claimed on the server first, with a fresh client_id: the server refuses a
//   second claim from another client_id (`invalid_state`), so without Web Locks, or between
//   widgets with different database names, one claimant still wins;
// * a `runs` record is written before the tool starts and the result goes to the outbox in the
//   same transaction as the record's "finished" mark, so a tool that finished is never run again
//   (its stored result is delivered), and one interrupted by a reload is reported as failed
//   rather than silently repeated. The record is read under the lock: a "started" record there
//   is a page that died running the tool, never another tab still running it.
import { uuid } from './ids.js';
import { fitResult } from './outbox.js';

const TERMINAL = new Set(['completed', 'failed', 'timeout', 'rejected']);

export class Executor {
  constructor({ store, db, conn, outbox, deviceId, runTool }) {
    Object.assign(this, { store, db, conn, outbox, deviceId, runTool });
    this.active = new Set();
    this.queue = Promise.resolve();
    this.ready = false; // set once the outbox was drained after a page load
  }

  // A sub-agent's session without a device of its own runs its tools where its parent's run.
  owns(sessionId, depth = 0) {
    const s = this.store.state.sessions[sessionId];
    if (!s) return false;
    if (s.device_id) return s.device_id === this.deviceId;
    if (s.parent_server_session_id && depth < 8) return this.owns(s.parent_server_session_id, depth + 1);
    return (s.client_id || '').startsWith(this.deviceId + ':');
  }

  // A session seen for the first time (a sub-agent's, created while its parent ran): its calls
  // that arrived before it are looked at again.
  onSession(session, old) {
    if (old) return;
    for (const rtc of Object.values(this.store.state.rtcs)) if (rtc.session_id === session.id) this.onRtc(rtc);
  }

  onRtc(rtc) {
    // Approved or rejected in another tab (or ended): this tab's own question is moot.
    if (rtc.status !== 'pending') this.dropApproval(rtc.id);
    if (!this.ready || TERMINAL.has(rtc.status) || this.active.has(rtc.id)) return;
    if (!this.owns(rtc.session_id)) return;
    this.active.add(rtc.id);
    this.handle(rtc).catch((err) => console.error('rtc-agent: tool call failed', err))
      .finally(() => this.active.delete(rtc.id));
  }

  // Re-examine every known unfinished RTC (after the outbox drained, after a reload of state).
  scan() {
    for (const rtc of Object.values(this.store.state.rtcs)) this.onRtc(rtc);
  }

  setLocal(rtcId, patch) {
    const local = this.store.state.local || (this.store.state.local = {});
    local[rtcId] = { ...(local[rtcId] || {}), ...patch };
    this.store.changed();
  }

  // Each tab may offer the approval; the tab that gets the lock claims and runs the call.
  async handle(rtc) {
    if (rtc.needs_approval && rtc.status !== 'executing' && !(await this.db.get('runs', rtc.id))) {
      const decision = await this.ask('approval', rtc);
      if (decision.elsewhere) return;
      if (!decision.approved) {
        await this.conn.rpc('v1.rtc.update_status', { rtc_id: rtc.id, status: 'rejected', reason: decision.reason || '', client_id: uuid() });
        return;
      }
    }
    await exclusively(rtc.id, () => this.claimAndRun(rtc));
  }

  async claimAndRun(rtc) {
    const run = await this.db.get('runs', rtc.id);
    if (run) {
      if (await this.outbox.has(rtc.id)) return this.outbox.deliver(rtc.id);
      if (run.state === 'started') {
        return this.finish(rtc, { success: false, error: 'the page was reloaded while this tool ran; it was not run again' });
      }
      return; // finished and acknowledged: nothing left to do
    }
    // The newest copy: another tab's claim may have arrived while this one asked or waited.
    const latest = this.store.state.rtcs[rtc.id] || rtc;
    if (latest.status === 'executing' || TERMINAL.has(latest.status)) return;
    try {
      await this.conn.rpc('v1.rtc.update_status', { rtc_id: rtc.id, status: 'executing', client_id: uuid() });
    } catch (err) {
      if (err.slug === 'invalid_state' || err.slug === 'permission_denied' || err.slug === 'rtc.not_found') return;
      throw err;
    }
    await this.db.put('runs', { rtc_id: rtc.id, state: 'started', at: Date.now() });
    this.setLocal(rtc.id, { running: true });
    let body;
    try {
      const result = rtc.tool_name === 'askUser'
        ? (await this.ask('question', rtc)).answers
        : await this.runTool(rtc.tool_name, rtc.parameters || {}, { sessionId: rtc.session_id, rtc });
      body = { success: true, result };
    } catch (err) {
      body = { success: false, error: String((err && err.message) || err) };
    }
    this.setLocal(rtc.id, { running: false });
    await this.finish(rtc, body);
  }

  async finish(rtc, body) {
    const entry = { rtc_id: rtc.id, body: fitResult({ ...body, client_id: uuid() }, this.conn.limits), attempts: 0, created: Date.now() };
    await this.db.putMany([['outbox', entry], ['runs', { rtc_id: rtc.id, state: 'finished', at: Date.now() }]]);
    this.outbox.onChange();
    await this.outbox.deliver(rtc.id);
  }

  dropApproval(rtcId) {
    const prompt = this.store.state.prompts && this.store.state.prompts[rtcId];
    if (prompt && prompt.kind === 'approval') prompt.resolve({ elsewhere: true });
  }

  // A question for the person (approval or askUser): the views render store.state.prompts.
  ask(kind, rtc) {
    return new Promise((resolve) => {
      const prompts = this.store.state.prompts || (this.store.state.prompts = {});
      prompts[rtc.id] = { kind, rtc, resolve: (answer) => { delete prompts[rtc.id]; this.store.changed(); resolve(answer); } };
      this.store.changed();
    });
  }
}

// `fn()` while holding this browser's lock on the call (origin-wide: every tab and widget of the
// site); nothing when another holder has it. Without Web Locks, `fn()` (the server decides).
function exclusively(rtcId, fn) {
  if (!(globalThis.navigator && navigator.locks && navigator.locks.request)) return fn();
  return navigator.locks.request(`rtc-agent-run:${rtcId}`, { ifAvailable: true }, (lock) => (lock ? fn() : null));
}
