// Fleet: the analyses under `/api/v1/fleet` as tables — the hottest code shared by
// every service, cycles per instruction per (service, platform), and the groups of
// units whose costs vary most with the functions and labels that go with it. The
// boost button raises sampling on the top groups' hosts for an hour (admin).
import { h, warningsBox } from './dom.js';
import { getJSON, send, query } from './api.js';
import * as state from './state.js';
import { header, selector } from './controls.js';
import { DataTable } from './table.js';
import { formatValue, middle, pct } from './format.js';

const TOKEN_KEY = 'profiledb-admin-token';
const BY = [['function', 'functions (self)'], ['function_total', 'functions (total)'], ['binary', 'binaries']];

export async function render(root, ui) {
  const { from, until, top, type, unit } = await header(root);
  top.append(form());
  if (!type) return;
  const q = query(type, selector());
  const groupBy = state.get('group_by', 'service_name');
  const unitLabel = state.get('unit', 'host');
  const [hot, cpi, variance] = await Promise.all([
    getJSON('/api/v1/fleet/hottest', { query: q, from, until, by: state.get('by', 'function'), limit: 20 }),
    getJSON('/api/v1/fleet/cpi', { selector: selector(), from, until }).catch((e) => ({ error: e.message })),
    getJSON('/api/v1/fleet/variance', { query: q, from, until, group_by: groupBy, unit: unitLabel }),
  ]);
  if (!ui.current()) return;
  const box = warningsBox(hot.warnings, variance.warnings);
  if (box) root.append(box);
  root.append(hottest(hot, unit), cpiSection(cpi), varianceSection(variance, unit, { query: q, from, until, groupBy, unitLabel }));
  ui.mark('fleetDrawn');
}

/** Which code to rank, and how variance groups and units are formed. */
function form() {
  const by = h('select', { 'aria-label': 'Hottest by' },
    BY.map(([v, label]) => h('option', { value: v, selected: v === state.get('by', 'function') }, label)));
  const groupBy = h('input', { value: state.get('group_by', 'service_name'), size: 22, 'aria-label': 'Variance groups', title: 'comma-separated labels whose values make a group' });
  const unitIn = h('input', { value: state.get('unit', 'host'), size: 10, 'aria-label': 'Variance unit', title: 'the label naming a unit (host, pod…)' });
  return h('form', {
    class: 'toolbar', 'aria-label': 'Fleet',
    onsubmit: (e) => {
      e.preventDefault();
      state.update({ by: by.value, group_by: groupBy.value.replace(/\s+/g, ''), unit: unitIn.value.trim() }, { push: true });
    },
  }, h('label', {}, 'Hottest', by), h('label', {}, 'Group by', groupBy), h('label', {}, 'Unit', unitIn),
  h('button', { type: 'submit', class: 'primary' }, 'Run'));
}

function hottest(ans, unit) {
  const host = h('section', { 'aria-label': 'Hottest shared code' }, h('h2', {}, 'Hottest shared code'),
    h('p', { class: 'muted' }, `total ${formatValue(ans.total, unit)} over ${ans.services} services`));
  const hasCost = ans.entries.some((e) => e.cost);
  new DataTable(host, {
    label: 'hottest', filterKey: 'name', sort: { key: 'share', desc: true },
    columns: [
      { key: 'name', label: ans.by === 'binary' ? 'Binary' : 'Function', middle: 56 },
      { key: 'services', label: 'Services', num: true },
      { key: 'value', label: 'Value', num: true, format: (v) => formatValue(v, unit) },
      ...(hasCost ? [{ key: 'cores', label: 'Avg cores', num: true, format: (v) => v.toFixed(3) }] : []),
      { key: 'share', label: 'Share', num: true, format: pct, bar: true },
    ],
  }).set(ans.entries.map((e) => ({
    name: e.name, services: e.services, value: e.value, share: e.share,
    cores: e.cost ? e.cost.core_seconds_per_day / 86400 : 0,
  })));
  return host;
}

function cpiSection(ans) {
  const host = h('section', { 'aria-label': 'CPI per service and platform' }, h('h2', {}, 'Cycles per instruction'));
  if (ans.error) {
    host.append(h('p', { class: 'muted' }, ans.error));
    return host;
  }
  if (!ans.rows.length) {
    host.append(h('p', { class: 'muted' }, 'No cycles and instructions profiles in the range.'));
    return host;
  }
  new DataTable(host, {
    label: 'cpi', filterKey: 'service', sort: { key: 'cpi', desc: true },
    columns: [
      { key: 'service', label: ans.keys[0] || 'service' },
      { key: 'platform', label: ans.keys[1] || 'platform' },
      { key: 'cycles', label: 'Cycles', num: true, format: (v) => formatValue(v, 'count') },
      { key: 'instructions', label: 'Instructions', num: true, format: (v) => formatValue(v, 'count') },
      { key: 'cpi', label: 'CPI', num: true, format: (v) => (v < 0 ? '–' : v.toFixed(3)), bar: true },
    ],
  }).set(ans.rows.map((r) => ({
    service: r.key[0], platform: r.key[1], cycles: r.cycles, instructions: r.instructions,
    cpi: r.cpi === null ? -1 : r.cpi,
  })));
  return host;
}

const groupName = (g) => Object.entries(g.group).map(([k, v]) => `${k}=${v}`).join(', ');

function varianceSection(ans, unit, params) {
  const host = h('section', { 'aria-label': 'Variance groups' }, h('h2', {}, 'Variance groups'),
    h('p', { class: 'muted' }, `CoV = stddev ÷ mean of each ${ans.unit}'s cost in the group; groups of fewer than two ${ans.unit} values are left out`));
  if (!ans.groups.length) {
    host.append(h('p', { class: 'muted' }, `No group has two ${ans.unit} values with data in the range.`));
    return host;
  }
  new DataTable(host, {
    label: 'variance', filterKey: 'name', sort: { key: 'cov', desc: true },
    columns: [
      { key: 'name', label: 'Group' },
      { key: 'units', label: 'Units', num: true },
      { key: 'mean', label: 'Mean', num: true, format: (v) => formatValue(v, unit) },
      { key: 'stddev', label: 'Stddev', num: true, format: (v) => formatValue(v, unit) },
      // Units that all cost the same have no costliest or cheapest one.
      { key: 'max', label: 'Costliest', format: (v, r) => (r.cov > 0 ? `${v} (${formatValue(r.maxValue, unit)})` : `all equal (${formatValue(r.maxValue, unit)})`) },
      { key: 'min', label: 'Cheapest', format: (v, r) => (r.cov > 0 ? `${v} (${formatValue(r.minValue, unit)})` : '–') },
      { key: 'cov', label: 'CoV', num: true, format: (v) => v.toFixed(3), bar: true },
    ],
  }).set(ans.groups.map((g) => ({
    name: groupName(g), units: g.units, mean: g.mean, stddev: g.stddev, cov: g.cov,
    max: g.max_unit.name, maxValue: g.max_unit.value, min: g.min_unit.name, minValue: g.min_unit.value,
  })));
  for (const g of ans.groups) {
    if (!g.explainers.length && !g.correlated_labels.length) continue;
    host.append(h('section', { class: 'explained', 'aria-label': `Why ${groupName(g)} varies` },
      h('h3', {}, `Why ${groupName(g)} varies`),
      h('div', { class: 'split3' }, explainers(g), correlated(g, unit))));
  }
  host.append(boost(params));
  return host;
}

function plainTable(label, heads, rows) {
  return h('table', { class: 'data', 'aria-label': label },
    h('thead', {}, h('tr', {}, heads.map(([text, num]) => h('th', { class: num ? 'num' : '' }, text)))),
    h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map(([text, num]) => (num
      ? h('td', { class: 'num' }, text)
      : h('td', { class: 'name', title: text }, middle(text, 56))))))));
}

function explainers(g) {
  return h('div', {}, h('h4', {}, 'Functions: share of the costly units against the others'),
    plainTable(`Functions explaining ${groupName(g)}`, [['Function'], ['Costly units', true], ['Others', true]],
      g.explainers.map((e) => [[e.function], [pct(e.high_share), true], [pct(e.low_share), true]])));
}

function correlated(g, unit) {
  if (!g.correlated_labels.length) {
    return h('div', {}, h('h4', {}, 'Labels'), h('p', { class: 'muted' }, 'No other label separates the units.'));
  }
  return h('div', {}, h('h4', {}, 'Labels going with the cost (effect in standard deviations)'),
    plainTable(`Labels correlated with ${groupName(g)}`,
      [['Label'], ['Units', true], ['Mean with', true], ['Mean without', true], ['Ratio', true], ['Effect', true]],
      g.correlated_labels.map((c) => [[`${c.label}=${c.value}`], [String(c.units), true],
        [formatValue(c.mean_with, unit), true], [formatValue(c.mean_without, unit), true],
        [c.ratio === null ? '–' : `${c.ratio.toFixed(2)}×`, true],
        [`${c.effect > 0 ? '+' : ''}${c.effect.toFixed(2)}`, true]])));
}

/** Raise sampling on the top groups' hosts for an hour (the admin token of Admin). */
function boost({ query: q, from, until, groupBy, unitLabel }) {
  const out = h('output', { 'aria-live': 'polite', class: 'mono' });
  const top = h('input', { type: 'number', min: 1, max: 20, value: 3, style: 'width:4em', 'aria-label': 'Groups to boost' });
  const hz = h('input', { type: 'number', min: 1, max: 10000, value: 99, style: 'width:6em', 'aria-label': 'Boost frequency' });
  const hosts = h('input', { type: 'number', min: 1, max: 1000, value: 10, style: 'width:5em', 'aria-label': 'Boost max hosts' });
  const run = async () => {
    const p = new URLSearchParams({
      query: q, from, until, group_by: groupBy, unit: unitLabel, top: top.value, frequency_hz: hz.value, max_hosts: hosts.value, duration: '1h',
    });
    const t = sessionStorage.getItem(TOKEN_KEY);
    try {
      const ans = await send('POST', `/api/v1/admin/fleet/variance/boost?${p}`, undefined, t ? { Authorization: `Bearer ${t}` } : {});
      const raised = ans.overrides.map((o) => o.host);
      out.textContent = `${raised.length} hosts at ${ans.frequency_hz} Hz until ${ans.until}: ${raised.join(', ')}`
        + (ans.over_budget.length ? `; over budget: ${ans.over_budget.join(', ')}` : '');
    } catch (e) { out.textContent = e.message; }
  };
  return h('div', { class: 'toolbar boost', 'aria-label': 'Boost sampling' },
    h('h3', {}, 'Raise sampling on the top groups’ hosts'),
    h('label', {}, 'Top groups', top), h('label', {}, 'Hz', hz), h('label', {}, 'Max hosts', hosts),
    h('button', { type: 'button', onclick: run }, 'Raise sampling for 1h'), out);
}
