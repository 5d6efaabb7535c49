// The virtual file system: files keyed by absolute path in IndexedDB; directories are implied
// by path prefixes. Every path is normalised; a `..` segment is refused outright, and so is any
// spelling of one that a decoder downstream (a host function, a URL, a download) could turn back
// into `..`: percent-encoded (also twice, also with an encoded `/` or `\`) or full-width dots.
// Control characters (NUL above all) and paths past MAX_PATH characters are refused too.
export class PathError extends Error {}

export const MAX_PATH = 4096;
const MAX_DECODES = 4; // "%25" nested deeper than this is refused rather than followed
const CONTROL = /[\u0000-\u001f\u007f]/;

// Lenient %XX decoding (never throws, unlike decodeURIComponent on a stray "%").
const percentDecode = (s) => s.replace(/%([0-9a-f]{2})/gi, (_, hex) => String.fromCharCode(parseInt(hex, 16)));

function spellsDotDot(segment) {
  let s = segment;
  for (let i = 0; i <= MAX_DECODES; i++) {
    if (s.normalize('NFKC').split(/[\\/]/).includes('..')) return true;
    const next = percentDecode(s);
    if (next === s) return false;
    s = next;
  }
  return true;
}

export function normalize(path) {
  if (typeof path !== 'string') throw new PathError('path must be a string');
  if (path.length > MAX_PATH) throw new PathError(`path is longer than ${MAX_PATH} characters`);
  if (CONTROL.test(path)) throw new PathError('path may not contain control characters');
  const parts = path.replace(/\\/g, '/').split('/').filter((p) => p && p !== '.');
  if (parts.some(spellsDotDot)) {
    const shown = path.length > 100 ? `${path.slice(0, 100)}…` : path;
    throw new PathError(`path may not contain "..": ${shown}`);
  }
  return '/' + parts.join('/');
}

export class Vfs {
  constructor(db) { this.db = db; this.listeners = new Set(); }

  onChange(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }
  _notify() { for (const fn of this.listeners) fn(); }

  async stat(path) { return (await this.db.get('files', normalize(path))) || null; }

  async readText(path) {
    const file = await this.stat(path);
    if (!file) throw new Error(`file not found: ${normalize(path)}`);
    return file.content;
  }

  async write(path, content) {
    const p = normalize(path);
    if (p === '/') throw new PathError('cannot write the root directory');
    if ((await this.list()).some((f) => f.path.startsWith(p + '/'))) throw new Error(`${p} is a directory`);
    const file = { path: p, content: String(content), size: new Blob([String(content)]).size, mtime: Date.now() };
    await this.db.put('files', file);
    this._notify();
    return file;
  }

  async remove(path) { await this.db.del('files', normalize(path)); this._notify(); }

  list() { return this.db.all('files'); }

  // Immediate children of a directory: [{name, path, dir, size}], directories first.
  async children(path) {
    const dir = normalize(path);
    const prefix = dir === '/' ? '/' : dir + '/';
    const seen = new Map();
    for (const f of await this.list()) {
      if (!f.path.startsWith(prefix)) continue;
      const rest = f.path.slice(prefix.length);
      const name = rest.split('/')[0];
      const isDir = rest.includes('/');
      if (!seen.has(name) || isDir) seen.set(name, { name, path: prefix + name, dir: isDir, size: isDir ? 0 : f.size });
    }
    return [...seen.values()].sort((a, b) => (b.dir - a.dir) || a.name.localeCompare(b.name));
  }

  async isDir(path) {
    const dir = normalize(path);
    if (dir === '/') return true;
    return (await this.list()).some((f) => f.path.startsWith(dir + '/'));
  }
}

// Glob to RegExp: `**` crosses directories, `*` and `?` do not; `{a,b}` alternatives.
export function globToRegExp(glob) {
  let re = '';
  let depth = 0;
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === '*' && glob[i + 1] === '*') {
      i++;
      if (glob[i + 1] === '/') { i++; re += '(?:.*/)?'; } else re += '.*';
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else if (c === '{') { depth++; re += '(?:'; }
    else if (c === '}' && depth) { depth--; re += ')'; }
    else if (c === ',' && depth) re += '|';
    else re += c.replace(/[.+^$()|[\]\\]/g, '\\$&');
  }
  return new RegExp('^' + re + '$');
}
