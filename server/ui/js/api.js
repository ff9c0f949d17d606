// The public HTTP API, as the UI calls it. Every request carries the tenant chosen in
// the URL (`X-Scope-OrgID`); errors become `Error`s with the server's JSON message.
import { get as stateGet } from './state.js';

let inFlight = 0;
const listeners = new Set();

/** True while no request is running (tests and the busy indicator poll this). */
export const idle = () => inFlight === 0;
export const onActivity = (f) => listeners.add(f);

function headers(extra = {}) {
  const h = { ...extra };
  const tenant = stateGet('tenant');
  if (tenant) h['X-Scope-OrgID'] = tenant;
  return h;
}

async function call(path, init) {
  inFlight++;
  listeners.forEach((f) => f(inFlight));
  try {
    const resp = await fetch(path, init);
    if (!resp.ok) {
      let msg = `${resp.status} ${resp.statusText}`;
      try {
        const body = await resp.json();
        if (body.message) msg = `${path.split('?')[0]}: ${body.message} (${resp.status} ${body.code})`;
      } catch { /* not JSON: keep the status line */ }
      const err = new Error(msg);
      err.status = resp.status;
      throw err;
    }
    return resp;
  } finally {
    inFlight--;
    listeners.forEach((f) => f(inFlight));
  }
}

function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') p.set(k, v);
  return p.toString();
}

export async function getJSON(path, params = {}, extraHeaders = {}) {
  const q = qs(params);
  return (await call(q ? `${path}?${q}` : path, { headers: headers(extraHeaders) })).json();
}

export async function getBlob(path, params = {}) {
  return (await call(`${path}?${qs(params)}`, { headers: headers() })).blob();
}

export async function send(method, path, body, extraHeaders = {}) {
  const resp = await call(path, {
    method,
    headers: headers({ 'Content-Type': 'application/json', ...extraHeaders }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

/** POSTs `blob` (a file) as the raw body to `path?params`; answers the JSON answer. */
export async function upload(path, params, blob) {
  const resp = await call(`${path}?${qs(params)}`, {
    method: 'POST', headers: headers({ 'Content-Type': 'application/octet-stream' }), body: blob,
  });
  return resp.json();
}

export const postJSON = (path, body, extraHeaders) => send('POST', path, body, extraHeaders);

/** `<type>{matchers}`: the query string every native read endpoint takes. */
export function query(type, selector) {
  return `${type}${selector || '{}'}`;
}
