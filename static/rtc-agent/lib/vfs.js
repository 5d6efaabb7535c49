// The virtual file system: files keyed by absolute path in IndexedDB; directories are implied
// by path prefixes. Every path is normalised; any `..` segment is refused outright.
export class PathError extends Error {}

export function normalize(path) {
  if (typeof path !== 'string') throw new PathError('path must be a string');
  const parts = path.replace(/\\/g, '/').split('/').filter((p) => p && p !== '.');
  if (parts.includes('..')) throw new PathError(`path may not contain "..": ${path}`);
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
