// Explore: the total over time, the flame graph of the range, and its top functions.
import { h, download } from './dom.js';
import { getJSON, getBlob, query } from './api.js';
import * as state from './state.js';
import { header, selector } from './controls.js';
import { TimeChart } from './chart.js';
import { FlameGraph } from './flame.js';
import { DataTable } from './table.js';
import { decode, functionTable, callers, callees, pathOf, findPath, rootTotal } from './flamemodel.js';
import { formatValue, pct, stepFor, reEscape } from './format.js';

export const DEFAULT_MAX_NODES = 8192;

export async function render(root, ui) {
  const { from, until, type, unit } = await header(root);
  if (!type) {
    root.append(h('p', { class: 'muted' }, 'No profiles in this range. Send some (see docs/api.md, /ingest) or pick a longer range.'));
    return;
  }
  const q = query(type, selector());
  const chart = new TimeChart(root, {
    unit,
    onSelect: (a, b) => state.update({ from: a, until: b, zoom: null }, { push: true }),
  });
  const left = h('section', { 'aria-label': 'Flame graph' });
  const right = h('section', { 'aria-label': 'Top functions' });
  root.append(h('div', { class: 'split' }, left, right));

  const step = stepFor(from, until);
  const maxNodes = state.get('max_nodes', DEFAULT_MAX_NODES);
  const [series, fg] = await Promise.all([
    getJSON('/api/v1/timeseries', { query: q, from, until, step }),
    getJSON('/api/v1/flamegraph', { query: q, from, until, max_nodes: maxNodes }),
  ]);
  if (!ui.current()) return;
  chart.set(series.series.length ? series.series[0].points : [], [from, until], series.step_ms);
  const m = decode(fg);
  flamePanel(left, m, { q, from, until, unit, type, ui });
  topTable(right, m, unit);
  ui.mark('flameDrawn');
}

function flamePanel(host, m, { q, from, until, unit, type, ui }) {
  const search = h('input', {
    type: 'search', value: state.get('search'), placeholder: 'Search functions (regex)',
    'aria-label': 'Search functions', size: 28,
  });
  const share = h('span', { class: 'stat', 'aria-live': 'polite' });
  const exportBtn = (label, path, params, name) => h('button', {
    type: 'button',
    onclick: async () => download(await getBlob(path, { query: q, from, until, ...params }), name),
  }, label);
  const fn = state.get('fn');
  const sandwich = h('div');
  const bar = h('div', { class: 'flame-bar' },
    search, share,
    h('button', { type: 'button', onclick: () => flame.reset() }, 'Reset zoom'),
    h('span', { class: 'stat' }, `total ${formatValue(rootTotal(m), unit)} · ${m.levels.reduce((s, l) => s + l.n, 0)} nodes`),
    exportBtn('pprof', '/api/v1/pprof', {}, 'profile.pb.gz'),
    exportBtn('folded', '/api/v1/merge', { format: 'folded' }, 'profile.folded.txt'),
    exportBtn('SVG', '/api/v1/render.svg', { title: type }, 'flamegraph.svg'));
  host.append(bar, sandwich);
  const flame = new FlameGraph(host, {
    unit,
    onPick: (n) => { if (n.depth > 0) state.update({ fn: n.name }, { quiet: true }); showSandwich(n.depth > 0 ? n.name : ''); },
    onZoom: (n) => state.update({ zoom: n ? pathOf(m, n.d, n.i) : null }, { quiet: true }),
  });
  flame.setModel(m);
  const zoom = state.getAll('zoom');
  const node = zoom.length ? findPath(m, zoom) : null;
  if (node) flame.zoomTo(node.d, node.i, true);
  const applySearch = () => {
    const s = flame.setSearch(search.value.trim());
    share.textContent = s === null ? '' : `matches: ${pct(s)} of total`;
    state.update({ search: search.value.trim() }, { quiet: true });
  };
  search.addEventListener('input', applySearch);
  applySearch();
  ui.flames.explore = flame;

  function showSandwich(name) {
    sandwich.replaceChildren();
    delete ui.flames.callers;
    delete ui.flames.callees;
    if (!name) return;
    sandwich.append(h('h2', {}, `Sandwich: ${name} `, h('button', {
      type: 'button', onclick: () => { state.update({ fn: null }, { quiet: true }); showSandwich(''); },
    }, 'Close')), h('p', { class: 'legend' }, 'Callers (above, inverted) and callees (below) of the function.'));
    ui.flames.callers = new FlameGraph(sandwich, { unit, inverted: true });
    ui.flames.callers.setModel(callers(m, name));
    ui.flames.callees = new FlameGraph(sandwich, { unit });
    ui.flames.callees.setModel(callees(m, name));
    sandwich.append(h('h2', {}, 'Flame graph'));
  }
  showSandwich(fn);
}

function topTable(host, m, unit) {
  const root = rootTotal(m) || 1;
  const rows = functionTable(m).map((r) => ({ ...r, selfShare: r.self / root, totalShare: r.total / root }));
  host.append(h('h2', { style: 'margin-top:0' }, 'Top functions'));
  const table = new DataTable(host, {
    label: 'functions', filterKey: 'name', sort: { key: 'self', desc: true },
    columns: [
      { key: 'name', label: 'Function' },
      { key: 'self', label: 'Self', num: true, format: (v) => formatValue(v, unit) },
      { key: 'selfShare', label: 'Self %', num: true, format: pct, bar: true },
      { key: 'total', label: 'Total', num: true, format: (v) => formatValue(v, unit) },
      { key: 'totalShare', label: 'Total %', num: true, format: pct },
    ],
    onRow: (r) => state.update({ search: `^${reEscape(r.name)}$`, fn: r.name }, { push: true }),
  });
  table.set(rows);
}
