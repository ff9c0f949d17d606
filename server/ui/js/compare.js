// Compare: two ranges (or two selections) side by side and as one diff flame graph,
// with the diff API's top movers and stability figures. A side's own selection
// narrows the shared one (both apply), as the diff API combines them.
import { h, warningsBox } from './dom.js';
import { getJSON, postJSON, query } from './api.js';
import * as state from './state.js';
import { selection, selector, range, timePicker } from './controls.js';
import { FlameGraph } from './flame.js';
import { DataTable } from './table.js';
import { decode } from './flamemodel.js';
import { formatValue, pct, pp } from './format.js';
import { DEFAULT_MAX_NODES } from './explore.js';

const BASE = ['now-2h', 'now-1h'];
const COMPARE = ['now-1h', 'now'];

export async function render(root, ui) {
  const base = range('bfrom', 'buntil', BASE);
  const cmp = range('cfrom', 'cuntil', COMPARE);
  const top = h('div');
  root.append(top);
  const { type, unit } = await selection(top, [Math.min(base[0], cmp[0]), Math.max(base[1], cmp[1])]);
  top.append(
    timePicker('Base range', 'bfrom', 'buntil', BASE),
    timePicker('Compare range', 'cfrom', 'cuntil', COMPARE),
    sideSelectors(),
  );
  if (!type) {
    root.append(h('p', { class: 'muted' }, 'No profiles in these ranges.'));
    return;
  }
  const shared = selector();
  const bare = (t) => t.trim().replace(/^\{|\}$/g, '').trim();
  const both = (own) => `{${[bare(shared), bare(own)].filter(Boolean).join(',')}}`;
  const [bown, cown] = [state.get('bsel'), state.get('csel')];
  const maxNodes = Number(state.get('max_nodes', DEFAULT_MAX_NODES));
  const side = ([start, end], own) => ({ start, end, selector: own ? `{${bare(own)}}` : undefined });
  const [diff, left, right] = await Promise.all([
    postJSON('/api/v1/diff', {
      profile_type: type, selector: shared, base: side(base, bown), compare: side(cmp, cown), top: 20, max_nodes: maxNodes,
    }),
    getJSON('/api/v1/flamegraph', { query: query(type, both(bown)), from: base[0], until: base[1], max_nodes: maxNodes }),
    getJSON('/api/v1/flamegraph', { query: query(type, both(cown)), from: cmp[0], until: cmp[1], max_nodes: maxNodes }),
  ]);
  if (!ui.current()) return;
  const box = warningsBox(diff.warnings, diff.notice);
  if (box) root.append(box);

  const s = diff.stats;
  root.append(h('div', { class: 'stats', 'aria-label': 'Diff figures' },
    stat('Manhattan distance', s.manhattan.toFixed(4), 'manhattan'),
    stat('Entropy base', `${s.entropy_base.toFixed(3)} bits`),
    stat('Entropy compare', `${s.entropy_compare.toFixed(3)} bits`),
    stat('Samples base', formatValue(s.samples_base, unit), 'samples_base'),
    stat('Samples compare', formatValue(s.samples_compare, unit), 'samples_compare')));

  const movers = h('section', { 'aria-label': 'Top movers' }, h('h2', {}, 'Top movers'));
  const diffHost = h('section', { 'aria-label': 'Diff flame graph' }, h('h2', {}, 'Diff flame graph'),
    h('p', { class: 'legend' }, 'Width: base + compare. ',
      h('i', { style: 'background:hsl(218,90%,50%)' }), ' share shrank · ',
      h('i', { style: 'background:hsl(220,6%,78%)' }), ' unchanged · ',
      h('i', { style: 'background:hsl(2,90%,50%)' }), ' share grew'));
  root.append(h('div', { class: 'split' }, diffHost, movers));
  ui.flames.diff = new FlameGraph(diffHost, { unit });
  ui.flames.diff.setModel(decode(diff.flamegraph, true));
  new DataTable(movers, {
    label: 'movers', filterKey: 'function', sort: { key: 'abs', desc: true },
    columns: [
      { key: 'function', label: 'Function', middle: 34 },
      { key: 'base_share', label: 'Base', num: true, format: pct },
      { key: 'compare_share', label: 'Compare', num: true, format: pct },
      { key: 'delta', label: 'Change', num: true, format: (v) => h('span', { class: v > 0 ? 'up' : 'down' }, pp(v)) },
      { key: 'abs', label: '|Δ|', num: true, format: pct, bar: true },
    ],
  }).set(diff.top.map((t) => ({ ...t, abs: Math.abs(t.delta) })));

  const l = h('section', { 'aria-label': 'Base flame graph' }, h('h2', {}, 'Base'));
  const r = h('section', { 'aria-label': 'Compare flame graph' }, h('h2', {}, 'Compare'));
  root.append(h('div', { class: 'split3' }, l, r));
  ui.flames.base = new FlameGraph(l, { unit });
  ui.flames.base.setModel(decode(left));
  ui.flames.compare = new FlameGraph(r, { unit });
  ui.flames.compare.setModel(decode(right));
  ui.mark('diffDrawn');
}

function stat(label, value, key) {
  return h('div', { dataset: key ? { stat: key } : {} }, h('span', {}, label), h('span', { class: 'num' }, value));
}

/** Optional whole selectors per side, to compare two label selections. */
function sideSelectors() {
  const b = h('input', { value: state.get('bsel'), size: 28, placeholder: '{env="canary"}', 'aria-label': 'Base selector' });
  const c = h('input', { value: state.get('csel'), size: 28, placeholder: '{env="prod"}', 'aria-label': 'Compare selector' });
  return h('form', {
    class: 'toolbar', 'aria-label': 'Selections per side',
    onsubmit: (e) => { e.preventDefault(); state.update({ bsel: b.value.trim(), csel: c.value.trim() }, { push: true }); },
  }, h('label', {}, 'Base narrowed to (optional)', b), h('label', {}, 'Compare narrowed to (optional)', c),
  h('button', { type: 'submit' }, 'Apply'));
}
