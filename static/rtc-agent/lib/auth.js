// Where the widget's access tokens come from: the original's three auth modes, plus the
// `getToken` property rtcagent always had.
// * static: `{accessToken, refreshToken?, expiresIn?}`: the access token as given; with a
//   refresh token it is renewed at the agent server's `/api/auth/token/refresh/` (rotating pair);
// * dynamic: `{getToken({deviceId}), refreshToken?({deviceId, refreshToken})}`: getToken for
//   the first token; refreshToken (else getToken again) for the next ones. refreshToken may
//   answer a string or `{accessToken, refreshToken?, expiresIn?}`;
// * provider: dynamic plus `isLoggedIn()` and `logout()`.
// A token is reused while more than a fifth of its life (at most 60 s) is left, and one refresh
// runs at a time whoever asks (the socket's refresh, HTTP calls, uploads). The socket is never
// dropped for a refresh: centrifuge-js asks for a new token when the server's `ttl` runs out and
// sends it in a `refresh` command on the same connection. `abort()` (destroy) rejects what is
// pending and every later request.
import { jwtClaims } from './ids.js';

export class AuthAborted extends Error {
  constructor() { super('rtc-agent was destroyed'); this.name = 'AbortError'; }
}

// The config's shape -> {mode, ...}; null when there is nothing to get a token with.
export function normalizeAuth(auth) {
  if (!auth) return null;
  if (typeof auth === 'function') return { mode: 'dynamic', getToken: auth };
  if (typeof auth !== 'object') throw new Error('auth must be an object');
  if (typeof auth.getToken === 'function') {
    const provider = typeof auth.isLoggedIn === 'function' || typeof auth.logout === 'function';
    return { ...auth, mode: provider ? 'provider' : 'dynamic' };
  }
  if (typeof auth.accessToken === 'string' && auth.accessToken) return { ...auth, mode: 'static' };
  throw new Error('auth needs accessToken, or a getToken function');
}

function expiry(token, expiresIn) {
  try {
    const c = jwtClaims(token);
    if (c.exp) return { exp: c.exp * 1000, life: c.iat ? (c.exp - c.iat) * 1000 : 15 * 60000 };
  } catch { /* not a JWT we can read: fall back to expiresIn */ }
  if (expiresIn) return { exp: Date.now() + expiresIn * 1000, life: expiresIn * 1000 };
  return { exp: Infinity, life: Infinity };
}

export class Auth {
  constructor(config, { server, deviceId, emit = () => {} }) {
    this.config = normalizeAuth(config);
    if (!this.config) throw new Error('no auth configured');
    this.server = server;
    this.deviceId = deviceId;
    this.emit = emit;
    this.access = this.config.mode === 'static' ? this.config.accessToken : '';
    this.refreshTokenValue = this.config.mode === 'static' ? this.config.refreshToken || '' : '';
    this.expiresIn = this.config.expiresIn;
    this.inflight = null;
    this.aborted = false;
    this.pending = new Set(); // reject functions of the requests waiting on a token
    this.userId = '';
  }

  get mode() { return this.config.mode; }

  fresh() {
    if (!this.access) return false;
    const { exp, life } = expiry(this.access, this.expiresIn);
    return exp - Date.now() > Math.min(60000, life / 5);
  }

  // A usable token (cached, else one refresh). `force`: a new one whatever is cached (the
  // server said the current one expired).
  token({ force = false } = {}) {
    if (this.aborted) return Promise.reject(new AuthAborted());
    if (!force && this.fresh()) return Promise.resolve(this.access);
    if (!this.inflight) {
      const first = !this.access;
      this.inflight = this._fetch(first).then((token) => {
        this.inflight = null;
        return token;
      }, (err) => {
        this.inflight = null;
        if (!this.aborted) this.emit('authError', { error: String((err && err.message) || err) });
        throw err;
      });
    }
    // Each caller waits on its own promise, so abort() can reject every one of them.
    return new Promise((resolve, reject) => {
      this.pending.add(reject);
      this.inflight.then(resolve, reject).finally(() => this.pending.delete(reject));
    });
  }

  async _fetch(first) {
    const c = this.config;
    let answer;
    if (c.mode === 'static') {
      answer = this.refreshTokenValue && !first ? await this._serverRefresh() : c.accessToken;
    } else if (!first && typeof c.refreshToken === 'function') {
      answer = await c.refreshToken({ deviceId: this.deviceId, refreshToken: this.refreshTokenValue });
    } else {
      answer = await c.getToken({ deviceId: this.deviceId });
    }
    if (this.aborted) throw new AuthAborted();
    const token = typeof answer === 'string' ? answer : answer && (answer.accessToken || answer.access);
    if (!token) throw new Error(first ? 'getToken returned no token' : 'the token refresh returned no token');
    if (answer && typeof answer === 'object') {
      if (answer.refreshToken || answer.refresh) this.refreshTokenValue = answer.refreshToken || answer.refresh;
      this.expiresIn = answer.expiresIn || undefined;
    }
    this.access = token;
    let sub = '';
    try { sub = String(jwtClaims(token).sub || ''); } catch { /* opaque token */ }
    this.userId = sub || String(c.userId || '');
    this.emit('authLogin', { userId: this.userId, refreshed: !first });
    return token;
  }

  // Static mode's refresh token at the agent server (rotating: the answer's pair replaces ours).
  async _serverRefresh() {
    const res = await fetch(new URL('/api/auth/token/refresh/', this.server), {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ refresh: this.refreshTokenValue }),
    });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(body.detail || body.message || `token refresh: HTTP ${res.status}`);
    return { accessToken: body.access, refreshToken: body.refresh };
  }

  isLoggedIn() {
    if (this.aborted) return false;
    if (typeof this.config.isLoggedIn === 'function') {
      try { return !!this.config.isLoggedIn(); } catch { return false; }
    }
    return true;
  }

  async logout() {
    const fn = this.config.logout;
    this.access = '';
    this.refreshTokenValue = '';
    if (typeof fn === 'function') await fn();
    this.emit('authLogout', {});
  }

  abort() {
    this.aborted = true;
    this.access = '';
    this.refreshTokenValue = '';
    for (const reject of [...this.pending]) reject(new AuthAborted());
    this.pending.clear();
  }
}
