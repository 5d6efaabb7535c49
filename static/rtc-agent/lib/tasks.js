// The session's work beyond one answer (docs/widget.md, "Goals, loops, todos and sub-agents"):
//   v1.goal.set {session_id, condition, max_rounds?}   v1.goal.cancel {session_id}
//   v1.goal.get {session_id}                           -> the session's goal (or none)
//   v1.loop.create {session_id, prompt, interval_seconds, max_runs?}
//   v1.loop.list {session_id?} -> {items}              v1.loop.stop {loop_id}
//   v1.session.list {parent_session_id} -> the sub-agent sessions a session started
// `goal` and `loop` entities arrive in Updates like any other (lib/sync.js keeps them in the
// store); the todo list is the session entity's `todo_list`. What is fetched here is fetched
// when a session is loaded (opened, or reloaded after the topic could not be recovered).
// Commands typed in the composer (lib/commands.js) are run here; their answer is the store's
// `commandNotice`.
import { formatInterval, parseCommand, parseLoopArgs, COMMANDS } from './commands.js';
import { t as tr } from './i18n.js';

const TREE_DEPTH = 4; // sub-agents of sub-agents ... listed this deep when a session loads
const TREE_SESSIONS = 200; // and at most this many sessions in one tree

// The entity of a query's or an action's reply: `{item}`, `{result: {goal}}`, `{result: entity}`...
function entityOf(res, key) {
  if (!res || typeof res !== 'object') return null;
  for (const c of [res.item, res[key], res.result && res.result[key], res.result && res.result.item, res.result]) {
    if (c && typeof c === 'object' && typeof c.id === 'string' && typeof c.session_id === 'string') return c;
  }
  return null;
}

const missing = (err) => err && (err.code === 'method_not_found' || err.slug === 'method_not_found' || /unknown method/i.test(err.message || ''));

export class Tasks {
  // `agent` gives conn, sync, store, send and fail.
  constructor({ agent, store }) {
    this.agent = agent;
    this.store = store;
  }

  rpc(method, params) { return this.agent.conn.rpc(method, params); }

  // An action's reply (`{result: {goal_id | loop_id | success}, updates}`): its Updates
  // applied; -> the entity it names, as the Updates brought it (null when they did not).
  applyReply(res, key, kind) {
    if (res && Array.isArray(res.updates)) res.updates.forEach((u) => this.agent.sync.apply(u));
    const entity = entityOf(res, key);
    if (entity) this.store.upsert(kind, entity);
    const id = res && res.result && res.result[`${key}_id`];
    return entity || (id && this.store.state[kind][id]) || null;
  }

  // --- loading -------------------------------------------------------------------------------
  // A session's goal, loops and sub-agent tree. Each part is optional: a server without
  // goals or loops (or an older one) answers method_not_found, which is not an error here.
  async loadSession(sessionId) {
    await Promise.all([this.loadGoal(sessionId), this.loadLoops(sessionId), this.loadTree(sessionId)]);
  }

  async loadGoal(sessionId) {
    try {
      const res = await this.rpc('v1.goal.get', { session_id: sessionId });
      const goal = entityOf(res, 'goal');
      if (goal) this.store.upsert('goals', goal);
    } catch (err) { if (!missing(err)) console.warn('rtc-agent: v1.goal.get', err.message || err); }
  }

  async loadLoops(sessionId) {
    try {
      let cursor = '';
      for (let page = 0; page < 10; page++) {
        const res = await this.rpc('v1.loop.list', { session_id: sessionId, ...(cursor ? { cursor } : {}) });
        for (const loop of res.items || []) this.store.upsert('loops', loop);
        if (!res.next_cursor) break;
        cursor = res.next_cursor;
      }
    } catch (err) { if (!missing(err)) console.warn('rtc-agent: v1.loop.list', err.message || err); }
  }

  // The sub-agents started in this session, theirs, and so on (breadth first, bounded).
  async loadTree(sessionId) {
    let level = [sessionId];
    let seen = 0;
    for (let depth = 0; depth < TREE_DEPTH && level.length && seen < TREE_SESSIONS; depth++) {
      const next = [];
      for (const parent of level) {
        let cursor = '';
        for (let page = 0; page < 10; page++) {
          let res;
          try {
            res = await this.rpc('v1.session.list', { parent_session_id: parent, cursor, limit: 50 });
          } catch (err) { console.warn('rtc-agent: sub-agents of', parent, err.message || err); return; }
          for (const s of res.items || []) {
            // A server that does not know `parent_session_id` answers the root sessions: only
            // the children of `parent` are taken as such.
            if (s.parent_server_session_id !== parent) continue;
            this.store.upsert('sessions', s);
            next.push(s.id);
            seen++;
          }
          if (!res.next_cursor) break;
          cursor = res.next_cursor;
        }
      }
      level = next;
    }
  }

  // --- actions -------------------------------------------------------------------------------
  // `target` is {session_id}, or, in a new conversation, what creates its session
  // (Agent.newSessionParams: client_session_id, agent_prompt, work_mode).
  async setGoal(target, condition, maxRounds) {
    const res = await this.rpc('v1.goal.set', { ...target, condition, ...(maxRounds ? { max_rounds: maxRounds } : {}) });
    return this.applyReply(res, 'goal', 'goals');
  }

  async cancelGoal(sessionId) {
    const res = await this.rpc('v1.goal.cancel', { session_id: sessionId });
    return this.applyReply(res, 'goal', 'goals');
  }

  async createLoop(target, { prompt, interval_seconds, max_runs }) {
    const res = await this.rpc('v1.loop.create', { ...target, prompt, interval_seconds, ...(max_runs ? { max_runs } : {}) });
    return this.applyReply(res, 'loop', 'loops');
  }

  // Where a command's goal or loop goes: the open conversation, or a new one. A server that
  // cannot create a session this way refuses; the command then asks for a first message.
  async target() {
    const session = this.current();
    return session ? { session_id: session.id } : this.agent.newSessionParams();
  }

  // After a command answered with an entity: a new conversation's session is opened.
  async follow(entity) {
    if (entity && entity.session_id && entity.session_id !== this.store.state.currentSession) {
      await this.agent.selectSession(entity.session_id);
    }
  }

  refusedNew(err, name) {
    if (this.current()) throw err;
    throw new Error(`${err.message || err}. Start the conversation with a message first, then use /${name}.`);
  }

  async stopLoop(loopId) {
    try {
      return this.applyReply(await this.rpc('v1.loop.stop', { loop_id: loopId }), 'loop', 'loops');
    } catch (err) { this.agent.fail(err); return null; }
  }

  async cancelGoalButton(sessionId) {
    try { return await this.cancelGoal(sessionId); } catch (err) { this.agent.fail(err); return null; }
  }

  // --- commands ------------------------------------------------------------------------------
  notice(text, kind = 'info') { this.store.set({ commandNotice: text ? { text, kind } : null }); }

  // Run a typed command -> true when it was taken (the composer then clears what was typed);
  // a refusal leaves the text as typed and says why.
  async command(text) {
    const cmd = parseCommand(text);
    if (!cmd) return false;
    if (!cmd.known) {
      this.notice(tr('cmd.unknown', { name: cmd.name, list: COMMANDS.map((c) => `/${c.name}`).join(', ') }), 'error');
      return false;
    }
    try {
      return await this[`cmd_${cmd.name}`](cmd.args);
    } catch (err) {
      this.notice(`/${cmd.name}: ${err.message || err}`, 'error');
      return false;
    }
  }

  current() {
    const s = this.store.state;
    return s.currentSession && s.sessions[s.currentSession] ? s.sessions[s.currentSession] : null;
  }

  async cmd_goal(args) {
    const session = this.current();
    const word = args.toLowerCase();
    if (!args) {
      const goal = session && this.store.sessionGoal(session.id);
      this.notice(goal ? tr('cmd.goalShow', { status: goal.status, rounds: goal.rounds, max: goal.max_rounds, condition: goal.condition })
        : tr('cmd.noGoal'));
      return true;
    }
    if (word === 'clear' || word === 'cancel') {
      const goal = session && this.store.sessionGoal(session.id);
      if (!goal || goal.status !== 'active') { this.notice(tr('cmd.noActiveGoal'), 'error'); return false; }
      await this.cancelGoal(session.id);
      this.notice(tr('cmd.goalCancelled'));
      return true;
    }
    const goal = await this.setGoal(await this.target(), args).catch((err) => this.refusedNew(err, 'goal'));
    await this.follow(goal);
    this.notice(goal ? tr('cmd.goalSetMax', { max: goal.max_rounds }) : tr('cmd.goalSet'));
    return true;
  }

  async cmd_loop(args) {
    const session = this.current();
    const word = args.toLowerCase();
    if (!args || word === 'list') {
      const loops = session ? this.store.sessionLoops(session.id).filter((l) => l.status === 'active') : [];
      this.notice(loops.length ? tr('cmd.loops', { list: loops.map((l) => tr('cmd.loopItem', { interval: formatInterval(l.interval_seconds), prompt: l.prompt })).join('; ') })
        : tr('cmd.noLoop'));
      return true;
    }
    if (word === 'stop') {
      const loops = session ? this.store.sessionLoops(session.id).filter((l) => l.status === 'active') : [];
      if (!loops.length) { this.notice(tr('cmd.noActiveLoop'), 'error'); return false; }
      for (const loop of loops) await this.applyReply(await this.rpc('v1.loop.stop', { loop_id: loop.id }), 'loop', 'loops');
      this.notice(loops.length === 1 ? tr('cmd.stoppedOne') : tr('cmd.stoppedMany', { n: loops.length }));
      return true;
    }
    const parsed = parseLoopArgs(args);
    if (parsed.error) { this.notice(parsed.error, 'error'); return false; }
    const loop = await this.createLoop(await this.target(), parsed).catch((err) => this.refusedNew(err, 'loop'));
    await this.follow(loop);
    const runs = loop ? loop.max_runs : parsed.max_runs;
    this.notice(tr(runs ? 'cmd.loopStartedMax' : 'cmd.loopStarted', { prompt: parsed.prompt, interval: formatInterval(parsed.interval_seconds), runs }));
    return true;
  }

  async cmd_compact(args) {
    const session = this.current();
    if (!session) { this.notice(tr('cmd.nothingToCompact'), 'error'); return false; }
    await this.rpc('v1.session.compact', { session_id: session.id, ...(args ? { custom_instruction: args } : {}) });
    this.notice(tr('cmd.compacting'));
    return true;
  }
}
