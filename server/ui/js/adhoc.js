// Ad-hoc: a profile file (pprof, JFR, folded) uploaded to look at without storing
// it: the tenant's uploads, one's flame graph and top functions, and its diff with
// another upload or with stored data. URL state: `id` (the upload shown), `pt`
// (its profile type), `with` (an upload id, or `stored`) and, for stored data,
// `cq` (`<type>{matchers}`), `cfrom`, `cuntil`.
import { h } from './dom.js';
import { getJSON, postJSON, send, upload } from './api.js';
import * as state from './state.js';
import { range, timePicker } from './controls.js';
import { FlameGraph } from './flame.js';
import { DataTable } from './table.js';
import { decode } from './flamemodel.js';
import { formatValue, formatTime, reEscape, typeName, typeNames, unitOf } from './format.js';
import { DEFAULT_MAX_NODES, topTable } from './explore.js';
import { diffPanel } from './compare.js';

export async function render(root, ui) {
  const listing = await getJSON('/api/v1/adhoc');
  if (!ui.current()) return;
  const { profiles, limits } = listing;
  ui.adhoc = profiles;
  root.append(uploadForm(limits, profiles.length));
  if (!profiles.length) {
    root.append(h('p', { class: 'muted empty' }, 'No ad-hoc profiles yet: pick a file above.'));
    return;
  }
  const id = profiles.some((p) => p.id === state.get('id')) ? state.get('id') : profiles[profiles.length - 1].id;
  const list = h('section', { 'aria-label': 'Uploaded profiles' }, h('h2', {}, 'Uploaded profiles'));
  root.append(list);
  uploadsTable(list, profiles, id);

  const current = profiles.find((p) => p.id === id);
  const types = current.profile_types.map((t) => t.profile_type);
  const pt = types.includes(state.get('pt')) ? state.get('pt') : defaultType(types);
  const unit = unitOf(pt);
  const maxNodes = state.get('max_nodes', DEFAULT_MAX_NODES);
  root.append(h('div', { class: 'toolbar', style: 'margin-top:.8rem' },
    h('h2', { style: 'margin:0' }, current.name),
    types.length > 1 ? typeSelect(types, pt) : h('span', { class: 'muted' }, typeName(pt))),
  compareForm(profiles, id, pt));

  const left = h('section', { 'aria-label': 'Flame graph' });
  const right = h('section', { 'aria-label': 'Top functions' });
  root.append(h('div', { class: 'split' }, left, right));
  const params = { profile_type: pt };
  const [fg, fns] = await Promise.all([
    getJSON(`/api/v1/adhoc/${id}/flamegraph`, { ...params, max_nodes: maxNodes }),
    getJSON(`/api/v1/adhoc/${id}/functions`, { ...params, limit: 0 }),
  ]);
  if (!ui.current()) return;
  left.append(h('div', { class: 'flame-bar' }, h('span', { class: 'stat' }, `total ${formatValue(fg.total, unit)}`)));
  const flame = new FlameGraph(left, { unit });
  flame.setModel(decode(fg));
  ui.flames.adhoc = flame;
  topTable(right, fns, unit, (r) => flame.setSearch(`^${reEscape(r.name)}$`));
  ui.mark('flameDrawn');

  const other = state.get('with');
  if (!other) return;
  const side = other === 'stored'
    ? (() => { const [start, end] = range('cfrom', 'cuntil'); return { query: state.get('cq', `${pt}{}`), start, end }; })()
    : { id: other };
  const diff = await postJSON('/api/v1/adhoc/diff', {
    base: side, compare: { id, profile_type: pt }, top: 20, max_nodes: Number(maxNodes),
  });
  if (!ui.current()) return;
  const section = h('section', { 'aria-label': 'Comparison' },
    h('h2', {}, `Compared with ${other === 'stored' ? side.query : nameOf(profiles, other)} (base) → ${current.name}`));
  root.append(section);
  diffPanel(section, diff, unit, ui);
  ui.mark('diffDrawn');
}

/** A CPU type when there is one (what the server picks without a type too). */
function defaultType(types) {
  return types.find((t) => t.split(':')[1] === 'cpu') || types[0];
}

function nameOf(profiles, id) {
  const p = profiles.find((x) => x.id === id);
  return p ? p.name : id;
}

function uploadForm(limits, held) {
  const status = h('span', { class: 'muted', 'aria-live': 'polite' });
  const input = h('input', {
    type: 'file', 'aria-label': 'Profile file', accept: '.pb,.gz,.pprof,.prof,.jfr,.txt,.folded,.collapsed,*/*',
    onchange: async () => {
      const file = input.files[0];
      if (!file) return;
      status.textContent = `uploading ${file.name}…`;
      const meta = await upload('/api/v1/adhoc', { name: file.name }, file);
      state.update({ id: meta.id, pt: null, with: null }, { push: true });
    },
  });
  const ttl = limits.ttl_seconds >= 3600 ? `${+(limits.ttl_seconds / 3600).toFixed(1)} h` : `${Math.round(limits.ttl_seconds / 60)} min`;
  return h('div', { class: 'toolbar', 'aria-label': 'Upload' },
    h('label', {}, 'View a profile file without storing it (pprof, JFR or folded)', input), status,
    h('span', { class: 'muted' },
      `${held} of ${limits.max_profiles} held · files up to ${formatValue(limits.max_file_bytes, 'bytes')} · kept ${ttl}`));
}

function uploadsTable(host, profiles, id) {
  const rows = profiles.map((p) => ({
    id: p.id,
    name: p.name,
    types: typeNames(p.profile_types.map((t) => t.profile_type)).join(', '),
    total: p.profile_types.length ? p.profile_types[0].total : 0,
    unit: p.profile_types.length ? unitOf(p.profile_types[0].profile_type) : 'count',
    size: p.file_bytes,
    expires: Date.parse(p.expires),
    shown: p.id === id ? '●' : '',
  }));
  new DataTable(host, {
    label: 'uploads', filterKey: 'name', sort: { key: 'expires', desc: true },
    columns: [
      { key: 'shown', label: '', format: (v) => v },
      { key: 'name', label: 'Name', middle: 40 },
      { key: 'types', label: 'Profile types', wrap: true },
      { key: 'total', label: 'Total (first type)', num: true, format: (v, r) => formatValue(v, r.unit) },
      { key: 'size', label: 'File', num: true, format: (v) => formatValue(v, 'bytes') },
      { key: 'expires', label: 'Expires', num: true, format: (v) => formatTime(v) },
      {
        key: 'id', label: '',
        format: (v) => h('button', {
          type: 'button', 'aria-label': `Delete ${nameOf(profiles, v)}`,
          onclick: async (e) => {
            e.stopPropagation();
            await send('DELETE', `/api/v1/adhoc/${v}`);
            state.update({ id: v === id ? null : id, with: null }, { push: true });
          },
        }, 'Delete'),
      },
    ],
    onRow: (r) => state.update({ id: r.id, pt: null, with: null }, { push: true }),
  }).set(rows);
}

function typeSelect(types, pt) {
  const names = typeNames(types);
  return h('label', { class: 'muted' }, 'Profile type ', h('select', {
    'aria-label': 'Profile type',
    onchange: (e) => state.update({ pt: e.target.value, with: null }, { push: true }),
  }, types.map((t, i) => h('option', { value: t, selected: t === pt }, names[i]))));
}

/** "Compare with": another upload, or stored data of a query and range. */
function compareForm(profiles, id, pt) {
  const others = profiles.filter((p) => p.id !== id);
  const pick = h('select', { 'aria-label': 'Compare with' },
    h('option', { value: '' }, '—'),
    others.map((p) => h('option', { value: p.id, selected: state.get('with') === p.id }, p.name)),
    h('option', { value: 'stored', selected: state.get('with') === 'stored' }, 'stored data…'));
  const q = h('input', { value: state.get('cq', `${pt}{}`), size: 44, 'aria-label': 'Stored query', title: '<profile type>{matchers}' });
  const stored = h('div', { class: 'toolbar', hidden: pick.value !== 'stored' },
    h('label', {}, 'Stored query', q), timePicker('Stored range', 'cfrom', 'cuntil'));
  pick.addEventListener('change', () => { stored.hidden = pick.value !== 'stored'; });
  // The range picker is a form of its own: the stored-data fields sit beside this
  // one, not inside it.
  const form = h('form', {
    class: 'toolbar', 'aria-label': 'Compare',
    onsubmit: (e) => {
      e.preventDefault();
      state.update({ with: pick.value || null, cq: pick.value === 'stored' ? q.value.trim() : null }, { push: true });
    },
  }, h('label', {}, 'Compare with (base)', pick), h('button', { type: 'submit', class: 'primary' }, 'Compare'));
  return h('div', { class: 'toolbar' }, form, stored);
}
