// Admin: segments per tenant, partition and level, and the admin actions (compact,
// retention). With `--admin-token` the token entered here is sent as a bearer token;
// it is kept in this tab's session storage, never in the URL.
import { h } from './dom.js';
import { getJSON, send } from './api.js';
import * as state from './state.js';
import { DataTable } from './table.js';
import { formatTime, formatValue } from './format.js';

const TOKEN_KEY = 'profiledb-admin-token';

function auth() {
  const t = sessionStorage.getItem(TOKEN_KEY);
  return t ? { Authorization: `Bearer ${t}` } : {};
}

export async function render(root, ui) {
  const token = h('input', { type: 'password', size: 24, value: sessionStorage.getItem(TOKEN_KEY) || '', 'aria-label': 'Admin token', autocomplete: 'off' });
  root.append(h('form', {
    class: 'toolbar', 'aria-label': 'Admin token',
    onsubmit: (e) => { e.preventDefault(); sessionStorage.setItem(TOKEN_KEY, token.value); window.dispatchEvent(new Event('statechange')); },
  }, h('label', {}, 'Admin token (when the server has one)', token), h('button', { type: 'submit' }, 'Use token')));
  const tenant = state.get('tenant');
  const ans = await getJSON('/api/v1/admin/segments', tenant ? { tenant } : {}, auth());
  if (!ui.current()) return;
  const groups = new Map();
  for (const s of ans.segments) {
    const k = `${s.tenant}\u0000${s.partition_start_ms}\u0000${s.level}`;
    const g = groups.get(k) || { tenant: s.tenant, partition: s.partition_start_ms, end: s.partition_end_ms, level: s.level, segments: 0, bytes: 0, samples: 0, series: 0 };
    g.segments++; g.bytes += s.size_bytes; g.samples += s.samples; g.series += s.series;
    groups.set(k, g);
  }
  root.append(h('h2', {}, 'Segments'), h('p', { class: 'muted', 'aria-label': 'Segment totals' },
    `${ans.count} segments, ${formatValue(ans.bytes, 'bytes')}${tenant ? ` for tenant ${tenant}` : ' across tenants'}`));
  new DataTable(root, {
    label: 'partitions', filterKey: 'tenant', sort: { key: 'partition', desc: true },
    columns: [
      { key: 'tenant', label: 'Tenant' },
      { key: 'partition', label: 'Partition', format: (v, g) => `${formatTime(v, false)} – ${formatTime(g.end, false).slice(11)}` },
      { key: 'level', label: 'Level', num: true },
      { key: 'segments', label: 'Segments', num: true },
      { key: 'series', label: 'Series', num: true },
      { key: 'samples', label: 'Samples', num: true, format: (v) => formatValue(v, 'count') },
      { key: 'bytes', label: 'Bytes', num: true, format: (v) => formatValue(v, 'bytes'), bar: true },
    ],
  }).set([...groups.values()]);
  const retention = await getJSON('/api/v1/admin/retention', tenant ? { tenant } : {}, auth());
  if (!ui.current()) return;
  const host = h('section', { 'aria-label': 'Retention' }, h('h2', {}, 'Retention per tenant'));
  root.append(host);
  new DataTable(host, {
    label: 'tenants', filterKey: 'tenant', sort: { key: 'tenant', desc: false },
    columns: [
      { key: 'tenant', label: 'Tenant' },
      { key: 'max_age', label: 'Keeps data for' },
      { key: 'has_data', label: 'Has data', format: (v) => (v ? 'yes' : 'no') },
    ],
  }).set(retention);
  root.append(actions(tenant));
  ui.mark('adminDrawn');
}

/** Compaction and retention for one tenant. */
function actions(tenant) {
  const out = h('output', { 'aria-live': 'polite', class: 'mono' });
  const who = h('input', { value: tenant || 'anonymous', size: 14, 'aria-label': 'Tenant for actions' });
  const age = h('input', { placeholder: '30d or forever', size: 12, 'aria-label': 'Retention' });
  const run = async (f) => {
    try { out.textContent = JSON.stringify(await f()); } catch (e) { out.textContent = e.message; }
  };
  return h('section', { 'aria-label': 'Admin actions' }, h('h2', {}, 'Actions'),
    h('div', { class: 'toolbar' }, h('label', {}, 'Tenant', who),
      h('button', { type: 'button', onclick: () => run(() => send('POST', '/api/v1/admin/compact', { tenant: who.value.trim() }, auth())) }, 'Compact now'),
      h('label', {}, 'Retention (max age)', age),
      h('button', {
        type: 'button',
        onclick: () => run(() => send('PUT', '/api/v1/admin/retention', {
          tenant: who.value.trim(), max_age: age.value.trim() === 'forever' ? null : age.value.trim(),
        }, auth())),
      }, 'Set retention')),
    out);
}
