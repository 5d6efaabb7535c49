// OAuth2 authorization code with PKCE (RFC 7636, S256) for host pages without a backend:
// a `getToken` for <rtc-agent> that logs the visitor in on the rtcagent server (docs/auth.md,
// "The PKCE flow for a static site").
//
//   import { pkceTokenSource } from 'https://agent.example.com/static/rtc-agent/lib/pkce.js';
//   const auth = pkceTokenSource({ server, clientId, redirectUri: location.origin + location.pathname });
//   await auth.handleRedirect();          // on every load: finishes a login coming back
//   agent.getToken = auth.getToken;       // logs in (a redirect) when there is no login yet
//
// What the browser keeps: the access token in memory only; the refresh token in sessionStorage
// (gone with the tab), replaced after every refresh (refresh tokens are single use; a used one
// presented again ends the login); the verifier and state of a login in progress in
// sessionStorage until the redirect comes back. One refresh at a time; refreshed when less than
// `skewSeconds` of the access token are left.
import { deviceId as browserDeviceId, jwtClaims } from './ids.js';

const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes)))
  .replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');

export function pkceVerifier() {
  return b64url(crypto.getRandomValues(new Uint8Array(32)));  // 43 characters
}

export async function pkceChallenge(verifier) {
  return b64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
}

const keys = (clientId) => ({ pending: `rtc-pkce:${clientId}:pending`, refresh: `rtc-pkce:${clientId}:refresh` });

// Start a login: remember verifier and state, then go to the server's authorization page.
export async function pkceLogin({ server, clientId, redirectUri, deviceId = browserDeviceId(),
                                  scope = '', storage = sessionStorage, navigate = (url) => location.assign(url) }) {
  const verifier = pkceVerifier();
  const state = pkceVerifier();
  storage.setItem(keys(clientId).pending, JSON.stringify({ verifier, state, redirectUri, deviceId }));
  const url = new URL('/oauth2/authorize', server);
  const params = { response_type: 'code', client_id: clientId, redirect_uri: redirectUri,
                   code_challenge: await pkceChallenge(verifier), code_challenge_method: 'S256',
                   state, device_id: deviceId };
  if (scope) params.scope = scope;
  url.search = new URLSearchParams(params).toString();
  navigate(url.toString());
}

async function tokenRequest(server, form) {
  const res = await fetch(new URL('/oauth2/token', server), {
    method: 'POST', body: new URLSearchParams(form), credentials: 'omit', cache: 'no-store',
  });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(body.error_description || body.error || `token endpoint: ${res.status}`);
    err.code = body.error || 'http_' + res.status;
    throw err;
  }
  return body;
}

export function pkceTokenSource({ server, clientId, redirectUri, storage = sessionStorage,
                                  skewSeconds = 60, autoLogin = true, scope = '' }) {
  const k = keys(clientId);
  let access = null;      // {token, exp}
  let inflight = null;    // the one refresh in progress

  const keep = (body) => {
    access = { token: body.access_token, exp: jwtClaims(body.access_token).exp };
    if (body.refresh_token) storage.setItem(k.refresh, body.refresh_token);
    return access.token;
  };
  const forget = () => { access = null; storage.removeItem(k.refresh); };

  // Finish a login if this page load is the redirect back; true when logged in afterwards.
  // Throws with `.code` (the server's `error`, or `state_mismatch`) when the login failed.
  async function handleRedirect(url = new URL(location.href)) {
    const raw = storage.getItem(k.pending);
    const code = url.searchParams.get('code');
    const error = url.searchParams.get('error');
    if (!raw || (!code && !error)) return loggedIn();
    storage.removeItem(k.pending);  // a code is single use; never try one twice
    const pending = JSON.parse(raw);
    const returned = url.searchParams.get('state');
    for (const name of ['code', 'state', 'error', 'error_description', 'iss']) url.searchParams.delete(name);
    history.replaceState(history.state, '', url.toString());
    if (returned !== pending.state) throw Object.assign(new Error('state does not match'), { code: 'state_mismatch' });
    if (error) throw Object.assign(new Error(error), { code: error });
    keep(await tokenRequest(server, {
      grant_type: 'authorization_code', code, redirect_uri: pending.redirectUri,
      client_id: clientId, code_verifier: pending.verifier, device_id: pending.deviceId,
    }));
    return true;
  }

  function loggedIn() { return Boolean(access || storage.getItem(k.refresh)); }

  async function refresh() {
    const token = storage.getItem(k.refresh);
    if (!token) return null;
    try {
      return keep(await tokenRequest(server, { grant_type: 'refresh_token', refresh_token: token, client_id: clientId }));
    } catch (err) {
      if (err.code === 'invalid_grant') { forget(); return null; }  // ended or reused: log in again
      throw err;
    }
  }

  // The widget's getToken: a live access token, refreshed when close to expiry; without a login,
  // starts one (a redirect) unless `autoLogin` is off, then throws.
  async function getToken({ deviceId } = {}) {
    if (access && access.exp - Date.now() / 1000 > skewSeconds) return access.token;
    inflight ??= refresh().finally(() => { inflight = null; });
    const token = await inflight;
    if (token) return token;
    if (autoLogin) {
      await pkceLogin({ server, clientId, redirectUri, deviceId: deviceId || browserDeviceId(), scope, storage });
      return new Promise(() => {});  // the page is navigating away
    }
    throw Object.assign(new Error('login required'), { code: 'login_required' });
  }

  function login(options = {}) {
    return pkceLogin({ server, clientId, redirectUri, scope, storage, ...options });
  }

  async function logout() {
    const token = storage.getItem(k.refresh);
    forget();
    if (token) {
      await fetch(new URL('/oauth2/revoke', server), { method: 'POST', body: new URLSearchParams({ token }) })
        .catch(() => {});
    }
  }

  return { handleRedirect, getToken, login, logout, loggedIn };
}
