// The file tools of protocol.md §6 over the VFS. Each returns the text the model will read, or
// throws an Error whose message becomes "[Tool Error] ...". `edit` needs a prior `read` of the
// same path in the same session (tracked in memory and in IndexedDB through `readLog`).
import { normalize, globToRegExp } from './vfs.js';

const MAX_LINES = 2000;

export function makeFileTools(vfs, readLog) {
  async function ls({ path = '/' } = {}) {
    const p = normalize(path);
    const file = await vfs.stat(p);
    if (file) return `${p} (${file.size} bytes)`;
    if (!(await vfs.isDir(p))) {
      if (p === '/') return '(empty)';
      throw new Error(`no such file or directory: ${p}`);
    }
    const rows = await vfs.children(p);
    return rows.map((r) => (r.dir ? `${r.name}/` : `${r.name} (${r.size} bytes)`)).join('\n') || '(empty)';
  }

  async function read({ path, offset = 0, limit = MAX_LINES }, ctx) {
    const p = normalize(path);
    const text = await vfs.readText(p);
    const lines = text.split('\n');
    if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
    const start = Math.max(0, Number(offset) || 0);
    const count = Math.max(1, Number(limit) || MAX_LINES);
    await readLog.mark(ctx.sessionId, p);
    if (!text) return '(empty file)';
    if (start >= lines.length) return `(offset ${start} is past the end: ${lines.length} lines)`;
    const page = lines.slice(start, start + count).map((l, i) => `${start + i + 1}\t${l}`);
    const more = start + count < lines.length ? `\n(${lines.length - start - count} more lines)` : '';
    return page.join('\n') + more;
  }

  async function write({ path, content }, ctx) {
    if (typeof content !== 'string') throw new Error('content must be a string');
    const file = await vfs.write(path, content);
    await readLog.mark(ctx.sessionId, file.path);
    return `wrote ${file.size} bytes to ${file.path}`;
  }

  async function edit({ path, old_string, new_string, replace_all = false }, ctx) {
    const p = normalize(path);
    if (!(await readLog.has(ctx.sessionId, p))) throw new Error(`read ${p} before editing it`);
    const text = await vfs.readText(p);
    if (typeof old_string !== 'string' || old_string === '') throw new Error('old_string must be a non-empty string');
    if (typeof new_string !== 'string') throw new Error('new_string must be a string');
    const count = text.split(old_string).length - 1;
    if (count === 0) throw new Error(`old_string not found in ${p}`);
    if (count > 1 && !replace_all) throw new Error(`old_string is not unique in ${p} (${count} matches); add context or set replace_all`);
    const next = replace_all ? text.split(old_string).join(new_string) : text.replace(old_string, () => new_string);
    await vfs.write(p, next);
    return `edited ${p}: ${replace_all ? count : 1} replacement(s)`;
  }

  async function under(path) {
    const p = normalize(path || '/');
    const prefix = p === '/' ? '/' : p + '/';
    return (await vfs.list()).filter((f) => f.path === p || f.path.startsWith(prefix))
      .sort((a, b) => a.path.localeCompare(b.path));
  }

  async function grep({ pattern, path = '/', caseSensitive = true }) {
    let re;
    try { re = new RegExp(pattern, caseSensitive === false ? 'i' : ''); } catch (e) { throw new Error(`invalid regular expression: ${e.message}`); }
    const hits = [];
    for (const f of await under(path)) {
      f.content.split('\n').forEach((line, i) => { if (re.test(line)) hits.push(`${f.path}:${i + 1}:${line}`); });
    }
    return hits.slice(0, 500).join('\n') || 'no matches';
  }

  async function find({ pattern, path = '/' }) {
    const base = normalize(path || '/');
    const re = globToRegExp(pattern.startsWith('/') ? pattern : `${base === '/' ? '' : base}/**/${pattern}`);
    const names = (await under(base)).map((f) => f.path).filter((p) => re.test(p));
    return names.join('\n') || 'no files found';
  }

  return { ls, read, write, edit, grep, find };
}

// Which paths were read in which session: edit's precondition, kept across reloads.
export class ReadLog {
  constructor(db) { this.db = db; }
  async mark(sessionId, path) {
    const key = `read:${sessionId}`;
    const set = new Set((await this.db.get('kv', key)) || []);
    set.add(path);
    await this.db.put('kv', [...set], key);
  }
  async has(sessionId, path) { return ((await this.db.get('kv', `read:${sessionId}`)) || []).includes(path); }
}
