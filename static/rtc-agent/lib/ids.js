// Identifiers: random ids, this browser's device id, and the token's subject (user id).
export const uuid = () => crypto.randomUUID();

export function deviceId() {
  const key = 'rtc-agent:device';
  let id = localStorage.getItem(key);
  if (!id) { id = 'dev-' + uuid(); localStorage.setItem(key, id); }
  return id;
}

// The payload of a JWT, unverified (the server verifies; we only need `sub` to pick storage).
export function jwtClaims(token) {
  const part = String(token).split('.')[1] || '';
  const json = atob(part.replace(/-/g, '+').replace(/_/g, '/'));
  return JSON.parse(decodeURIComponent(escape(json)));
}
