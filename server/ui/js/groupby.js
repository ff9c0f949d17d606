// Group by: the GWP k-key query (`POST /api/v1/query`) as a sortable table; a row
// opens Explore filtered to it (labels become matchers, a function becomes a search).
import { h, warningsBox } from './dom.js';
import { getJSON, postJSON, query } from './api.js';
import * as state from './state.js';
import { header, selector } from './controls.js';
import { DataTable } from './table.js';
import { formatValue, pct, quote, reEscape } from './format.js';

const SPECIAL = ['function', 'function_total', 'binary'];

export async function render(root, ui) {
  const { from, until, top, type, unit } = await header(root);
  const keys = state.get('keys', 'function').split(',').map((k) => k.trim()).filter(Boolean);
  top.append(await form(type, keys, [from, until]));
  if (!type) return;
  const limit = Number(state.get('limit', 100));
  const ans = await postJSON('/api/v1/query', {
    profile_type: type, selector: selector(), start: from, end: until, group_by: keys,
    function: state.get('fn_re') || undefined, exclude_function: state.get('xfn') || undefined, limit,
  });
  if (!ui.current()) return;
  const box = warningsBox(ans.warnings);
  if (box) root.append(box);
  const total = ans.total || 1;
  root.append(h('p', { class: 'muted', 'aria-label': 'Group-by total' },
    `${ans.rows.length} groups · total ${formatValue(ans.total, unit)}`));
  const rows = ans.rows.map((r) => {
    const row = { value: r.value, share: r.value / total };
    keys.forEach((k, j) => { row[`k${j}`] = r.key[j]; });
    return row;
  });
  new DataTable(root, {
    label: 'groups', filterKey: 'k0', sort: { key: 'value', desc: true }, limit: 1000,
    columns: [
      ...keys.map((k, j) => ({ key: `k${j}`, label: k })),
      { key: 'value', label: 'Value', num: true, format: (v) => formatValue(v, unit) },
      { key: 'share', label: 'Share', num: true, format: pct, bar: true },
    ],
    onRow: (row) => state.navigate(exploreLink(keys, row)),
  }).set(rows);
  ui.mark('groupByDrawn');
}

/** Explore for one row: label keys as matchers, a function key as the search. */
function exploreLink(keys, row) {
  const m = state.getAll('m');
  let search = '';
  let service = state.get('service');
  keys.forEach((k, j) => {
    const v = row[`k${j}`];
    if (k === 'function' || k === 'function_total') search = `^${reEscape(v)}$`;
    else if (k === 'service_name') service = v;
    else if (k !== 'binary') m.push(`${k}=${quote(v)}`);
  });
  return state.link('explore', {
    type: state.get('type'), service, m, sel: state.get('sel'), from: state.get('from'), until: state.get('until'),
    search, fn: search ? row[`k${keys.findIndex((k) => k.startsWith('function'))}`] : '',
  });
}

async function form(type, keys, [from, until]) {
  const names = type
    ? await getJSON('/api/v1/labels', { query: query(type, selector()), from, until }).catch(() => [])
    : [];
  const options = [...SPECIAL, ...names.filter((n) => !n.startsWith('__'))];
  const list = h('datalist', { id: 'groupby-keys' }, options.map((o) => h('option', { value: o })));
  const keysIn = h('input', { value: keys.join(','), size: 30, list: 'groupby-keys', 'aria-label': 'Group by keys', title: `comma-separated: ${options.join(', ')}` });
  const fn = h('input', { value: state.get('fn_re'), size: 18, placeholder: 'regex', 'aria-label': 'Function filter' });
  const xfn = h('input', { value: state.get('xfn'), size: 18, placeholder: 'regex', 'aria-label': 'Exclude function' });
  const limit = h('input', { type: 'number', min: 1, max: 100000, value: state.get('limit', 100), style: 'width:6em', 'aria-label': 'Row limit' });
  return h('form', {
    class: 'toolbar', 'aria-label': 'Group by',
    onsubmit: (e) => {
      e.preventDefault();
      state.update({ keys: keysIn.value.replace(/\s+/g, ''), fn_re: fn.value.trim(), xfn: xfn.value.trim(), limit: limit.value }, { push: true });
    },
  }, list, h('label', {}, `Group by (${SPECIAL.join(', ')} or a label)`, keysIn),
  h('label', {}, 'Only stacks with function', fn), h('label', {}, 'Without function', xfn),
  h('label', {}, 'Rows', limit), h('button', { type: 'submit', class: 'primary' }, 'Run'));
}
