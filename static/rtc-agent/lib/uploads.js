// Attachments on their way to the object store: checked against the server's limits and the
// accepted types before any request, named by their content (`user-<id>/uploads/<sha-256>.<ext>`,
// so the same file is one object), then sent by a presigned PUT (`POST /api/presigned-url`) with
// XMLHttpRequest, the only browser API that reports upload progress. Network errors, 5xx and
// SlowDown are retried three times (1, 2, 4 s); then the chip offers Retry. Cancel aborts the
// request and forgets the file. The queue lives in the store (`state.uploads`, plain snapshots)
// so the composer and the file panel see the same list; XHRs and timers stay in here.
import { uuid } from './ids.js';
import { classify, formatSize, keyExtension } from './filetypes.js';

const RETRY_DELAYS = [1000, 2000, 4000];
const PRESIGN_EXPIRES = 900; // seconds: enough for a slow upload, short for a leaked URL
// The server's own defaults, for a connect reply that does not carry the limits.
const DEFAULT_LIMITS = { max_attachment_bytes: 100 * 1024 * 1024, max_attachments: 10 };

export class UploadError extends Error {
  constructor(message, { status = 0, code = '', retryable = false } = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryable = retryable;
  }
}

const abortError = () => new DOMException('upload cancelled', 'AbortError');

export async function sha256Hex(blob) {
  // SubtleCrypto exists only in secure contexts (https, localhost); elsewhere the key is random
  // and the same file is uploaded again.
  if (!globalThis.crypto || !crypto.subtle) return uuid().replace(/-/g, '');
  const digest = await crypto.subtle.digest('SHA-256', await blob.arrayBuffer());
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

// `{url, expires_at}` for one key of the caller's prefix.
export async function presign({ server, token, key, operation = 'put', expiresIn = PRESIGN_EXPIRES, signal }) {
  let res;
  try {
    res = await fetch(`${server}/api/presigned-url`, {
      method: 'POST', signal,
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
      body: JSON.stringify({ operation, key, expires_in: expiresIn }),
    });
  } catch (err) {
    if (signal && signal.aborted) throw abortError();
    throw new UploadError(`the server could not be reached (${err.message})`, { retryable: true });
  }
  const body = await res.json().catch(() => ({}));
  if (res.ok && body.url) return body;
  const detail = body.detail || body.error || Object.values(body).flat().join(' ') || res.statusText;
  throw new UploadError(`the upload was refused (${res.status}: ${detail})`,
    { status: res.status, retryable: res.status >= 500 || res.status === 429 });
}

// S3 answers errors as XML: <Error><Code>…</Code><Message>…</Message></Error>.
function s3Error(xhr) {
  const text = xhr.responseText || '';
  const pick = (tag) => (text.match(new RegExp(`<${tag}>([^<]*)</${tag}>`)) || [])[1] || '';
  return { code: pick('Code'), message: pick('Message') };
}

// A plain PUT of the bytes to a presigned URL; onProgress(loaded, total).
export function putObject(url, blob, { contentType, onProgress, signal } = {}) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) { reject(abortError()); return; }
    const xhr = new XMLHttpRequest();
    xhr.open('PUT', url);
    if (contentType) xhr.setRequestHeader('Content-Type', contentType);
    xhr.upload.onprogress = (e) => onProgress && onProgress(e.loaded, e.lengthComputable ? e.total : blob.size);
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) { resolve({ etag: xhr.getResponseHeader('ETag') }); return; }
      const { code, message } = s3Error(xhr);
      const retryable = xhr.status >= 500 || code === 'SlowDown' || code === 'RequestTimeout' || xhr.status === 429;
      const words = code === 'EntityTooLarge' ? 'the file is larger than the server accepts'
        : code === 'QuotaExceeded' ? 'your storage quota is used up'
        : code === 'AccessDenied' ? 'the server refused access to the upload'
        : code === 'SlowDown' ? 'the server is busy' : message || `HTTP ${xhr.status}`;
      reject(new UploadError(`${words} (${code || xhr.status})`, { status: xhr.status, code, retryable }));
    };
    xhr.onerror = () => reject(new UploadError('the connection failed during the upload', { retryable: true }));
    xhr.ontimeout = xhr.onerror;
    xhr.onabort = () => reject(abortError());
    if (signal) signal.addEventListener('abort', () => xhr.abort(), { once: true });
    xhr.send(blob);
  });
}

// The composer's attachment queue for one agent (one server, one user).
export class Uploads {
  constructor({ store, server, userId, getToken, limits }) {
    this.store = store;
    this.server = server;
    this.userId = userId; // () => the user's id (the token's `sub`), known once started
    this.getToken = getToken;
    this.limits = limits; // () => the connect reply's limits
    this.live = new Map(); // id -> {file, controller, timer}
    this.uploadedKeys = new Set(); // keys this page already stored: not sent twice
  }

  get items() { return this.store.state.uploads; }
  get busy() { return this.items.some((u) => u.status !== 'done' && u.status !== 'failed'); }
  get failed() { return this.items.some((u) => u.status === 'failed'); }

  _limits() { return { ...DEFAULT_LIMITS, ...((this.limits && this.limits()) || {}) }; }

  _patch(id, patch) {
    const items = this.items.map((u) => (u.id === id ? { ...u, ...patch } : u));
    this.store.set({ uploads: items });
  }

  // Files the user picked, pasted, dropped or took from the VFS. Refused ones (type, size,
  // count) are reported in `state.uploadNotice` and never leave the page.
  add(files) {
    const { max_attachment_bytes: maxBytes, max_attachments: maxFiles } = this._limits();
    const refused = [];
    const accepted = [];
    for (const file of files) {
      const what = classify(file);
      if (what.reason) refused.push(`${file.name}: ${what.reason}.`);
      else if (file.size > maxBytes) refused.push(`${file.name} is ${formatSize(file.size)}: files may be at most ${formatSize(maxBytes)}.`);
      else if (file.size === 0) refused.push(`${file.name} is empty.`);
      else accepted.push([file, what]);
    }
    const room = Math.max(0, maxFiles - this.items.length);
    if (accepted.length > room) {
      const left = accepted.splice(room);
      refused.push(`At most ${maxFiles} files per message: ${left.map(([f]) => f.name).join(', ')} not attached.`);
    }
    const added = accepted.map(([file, what]) => {
      const id = uuid();
      const previewUrl = what.kind === 'image' ? URL.createObjectURL(file) : '';
      this.live.set(id, { file, controller: null, timer: null });
      return { id, name: file.name, size: file.size, mimetype: what.mimetype, kind: what.kind,
        key: '', status: 'preparing', loaded: 0, error: '', previewUrl, attempt: 0 };
    });
    this.store.set({ uploads: [...this.items, ...added], uploadNotice: refused.join('\n') });
    for (const item of added) this._run(item.id);
    return { added: added.length, refused };
  }

  async _run(id) {
    const live = this.live.get(id);
    if (!live) return;
    const controller = new AbortController();
    live.controller = controller;
    const { signal } = controller;
    try {
      let item = this.items.find((u) => u.id === id);
      const userId = this.userId();
      if (!userId) throw new UploadError('not connected yet: try again in a moment');
      if (!item.key) {
        const hash = await sha256Hex(live.file);
        if (signal.aborted) return;
        const key = `user-${userId}/uploads/${hash}.${keyExtension(item.name, item.mimetype)}`;
        if (this.items.some((u) => u.id !== id && u.key === key)) {
          this.remove(id);
          this.store.set({ uploadNotice: `${item.name} is already attached.` });
          return;
        }
        this._patch(id, { key });
        item = { ...item, key };
      }
      if (this.uploadedKeys.has(item.key)) { this._patch(id, { status: 'done', loaded: item.size }); return; }
      this._patch(id, { status: 'uploading', error: '', loaded: 0 });
      const token = await this.getToken();
      const { url } = await presign({ server: this.server, token, key: item.key, signal });
      await putObject(url, live.file, {
        contentType: item.mimetype, signal,
        onProgress: (loaded) => this._patch(id, { loaded: Math.min(loaded, item.size) }),
      });
      this.uploadedKeys.add(item.key);
      this._patch(id, { status: 'done', loaded: item.size });
    } catch (err) {
      if (err.name === 'AbortError' || !this.live.has(id)) return;
      const item = this.items.find((u) => u.id === id);
      if (err.retryable && item.attempt < RETRY_DELAYS.length) {
        const delay = RETRY_DELAYS[item.attempt];
        this._patch(id, { status: 'waiting', attempt: item.attempt + 1, error: `${err.message}; retrying in ${delay / 1000} s` });
        live.timer = setTimeout(() => { live.timer = null; this._run(id); }, delay);
      } else {
        this._patch(id, { status: 'failed', error: err.message || String(err) });
      }
    }
  }

  // Retry a failed upload by hand (the automatic retries start over).
  retry(id) {
    const item = this.items.find((u) => u.id === id);
    if (!item || item.status !== 'failed') return;
    this._patch(id, { status: 'preparing', attempt: 0, error: '' });
    this._run(id);
  }

  // Cancel: abort the request (or the pending retry) and forget the file.
  remove(id) {
    const live = this.live.get(id);
    this.live.delete(id);
    if (live) {
      if (live.timer) clearTimeout(live.timer);
      if (live.controller) live.controller.abort();
    }
    const item = this.items.find((u) => u.id === id);
    if (item && item.previewUrl) URL.revokeObjectURL(item.previewUrl);
    this.store.set({ uploads: this.items.filter((u) => u.id !== id) });
  }

  // The finished queue as `files` of a user message (FileAttachment). The queue is emptied; the
  // local previews move to `state.previews` (by key) until the server's thumbnails replace them.
  take() {
    if (this.busy || this.failed) throw new Error('attachments are still uploading');
    const files = this.items.map((u) => ({ fileid: u.key, mimetype: u.mimetype, extra: { name: u.name, size: u.size } }));
    const previews = { ...this.store.state.previews };
    for (const u of this.items) {
      if (u.previewUrl && !previews[u.key]) previews[u.key] = u.previewUrl;
      else if (u.previewUrl) URL.revokeObjectURL(u.previewUrl);
    }
    this.live.clear();
    this.store.set({ uploads: [], previews });
    return files;
  }

  notice(text) { this.store.set({ uploadNotice: text }); }

  // destroy(): every request and pending retry aborted.
  stop() { for (const id of [...this.live.keys()]) this.remove(id); }
}
