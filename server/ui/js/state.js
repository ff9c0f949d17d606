// View state lives in the URL: `/ui/<view>?type=…&service=…&m=…&from=…&until=…`,
// so reloading or sharing a link shows the same thing.

export const VIEWS = ['explore', 'labels', 'compare', 'groupby', 'fleet', 'alerts', 'admin'];

/** The view named by the path (`/` and unknown paths show Explore). */
export function currentView() {
  const m = /^\/ui\/([a-z]+)/.exec(location.pathname);
  return m && VIEWS.includes(m[1]) ? m[1] : 'explore';
}

export function params() {
  return new URLSearchParams(location.search);
}

export function get(name, fallback = '') {
  const v = params().get(name);
  return v === null || v === '' ? fallback : v;
}

export function getAll(name) {
  return params().getAll(name).filter((v) => v !== '');
}

/**
 * Applies `changes` (null or '' removes a key, arrays set repeated keys) to the URL.
 * `push` adds a history entry (back returns to the previous view); otherwise the
 * current one is replaced. Listeners of `statechange` re-render.
 */
export function update(changes, { push = false, view = currentView(), quiet = false } = {}) {
  const p = params();
  for (const [k, v] of Object.entries(changes)) {
    p.delete(k);
    if (Array.isArray(v)) v.filter((x) => x !== '').forEach((x) => p.append(k, x));
    else if (v !== null && v !== undefined && v !== '') p.set(k, String(v));
  }
  const url = `/ui/${view}${p.toString() ? `?${p}` : ''}`;
  if (url === location.pathname + location.search) return;
  history[push ? 'pushState' : 'replaceState'](null, '', url);
  if (!quiet) window.dispatchEvent(new Event('statechange'));
}

/** A link to `view` with the given parameters (plus the tenant, which follows every view). */
export function link(view, values) {
  const p = new URLSearchParams();
  const tenant = get('tenant');
  if (tenant) p.set('tenant', tenant);
  for (const [k, v] of Object.entries(values)) {
    if (Array.isArray(v)) v.forEach((x) => p.append(k, x));
    else if (v !== null && v !== undefined && v !== '') p.set(k, String(v));
  }
  return `/ui/${view}${p.toString() ? `?${p}` : ''}`;
}

/** Shows `url` (same origin) as a new history entry without reloading the page. */
export function navigate(url) {
  history.pushState(null, '', url);
  window.dispatchEvent(new Event('statechange'));
}
