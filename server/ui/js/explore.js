// Explore: the rate over time, the flame graph of the range, and its top functions.
// The flame graph is truncated to `max_nodes`; the top functions, the search's
// share and the sandwich come from the server, computed over the whole merge.
import { h, download, warningsBox } from './dom.js';
import { getJSON, getBlob, postJSON, query } from './api.js';
import * as state from './state.js';
import { header, selector } from './controls.js';
import { TimeChart } from './chart.js';
import { FlameGraph } from './flame.js';
import { DataTable } from './table.js';
import { decode, dropRoot, pathOf, findPath, rootTotal, nodeCount } from './flamemodel.js';
import { formatValue, linkTime, pct, stepFor, reEscape } from './format.js';

export const DEFAULT_MAX_NODES = 8192;

export async function render(root, ui) {
  const { from, until, type, unit } = await header(root);
  if (!type) {
    root.append(h('p', { class: 'muted' }, 'No profiles in this range. Send some (see docs/api.md, /ingest) or pick a longer range.'));
    return;
  }
  const q = query(type, selector());
  const notes = h('div');
  root.append(notes);
  const chart = new TimeChart(root, {
    type,
    onSelect: (a, b) => state.update({ from: linkTime(a), until: linkTime(b), zoom: null }, { push: true }),
  });
  ui.chart = chart;
  const left = h('section', { 'aria-label': 'Flame graph' });
  const right = h('section', { 'aria-label': 'Top functions' });
  root.append(h('div', { class: 'split' }, left, right));

  const step = stepFor(from, until);
  const maxNodes = state.get('max_nodes', DEFAULT_MAX_NODES);
  const range = { from, until };
  const [series, fg, fns] = await Promise.all([
    getJSON('/api/v1/timeseries', { query: q, ...range, step }),
    getJSON('/api/v1/flamegraph', { query: q, ...range, max_nodes: maxNodes }),
    getJSON('/api/v1/functions', { query: q, ...range, limit: 0 }),
  ]);
  if (!ui.current()) return;
  const box = warningsBox(series.warnings, fg.warnings, fns.warnings);
  if (box) notes.append(box);
  chart.set(series.series.length ? series.series[0].points : [], [from, until], series.step_ms);
  if (!fg.total) {
    left.append(h('p', { class: 'muted empty' }, 'No samples of this selection in the range.'));
    ui.mark('flameDrawn');
    return;
  }
  const m = decode(fg);
  flamePanel(left, m, { q, type, unit, ui, range, maxNodes });
  topTable(right, fns, unit);
  ui.mark('flameDrawn');
}

function flamePanel(host, m, { q, type, unit, ui, range, maxNodes }) {
  const search = h('input', {
    type: 'search', value: state.get('search'), placeholder: 'Search functions (regex)',
    'aria-label': 'Search functions', size: 28,
  });
  // Case-sensitive by default, as Pyroscope and grep are; the toggle ignores case.
  let ignoreCase = state.get('ic') === '1';
  const caseBtn = h('button', {
    type: 'button', class: 'toggle', title: 'Match case (on: exact case; off: ignore case)',
    'aria-label': 'Match case', 'aria-pressed': String(!ignoreCase),
  }, 'Aa');
  const share = h('span', { class: 'stat', 'aria-live': 'polite' });
  const exportBtn = (label, path, params, name) => h('button', {
    type: 'button',
    onclick: async () => download(await getBlob(path, { query: q, ...range, ...params }), name),
  }, label);
  const sandwich = h('div');
  const legend = h('div', { class: 'legend packages', 'aria-label': 'Packages' });
  const bar = h('div', { class: 'flame-bar' },
    search, caseBtn, share,
    h('button', { type: 'button', onclick: () => flame.reset() }, 'Reset zoom'),
    h('span', { class: 'stat', title: `at most ${maxNodes} nodes are drawn; the rest is in "other" frames` },
      `total ${formatValue(rootTotal(m), unit)} · ${nodeCount(m)} nodes`),
    exportBtn('pprof', '/api/v1/pprof', {}, 'profile.pb.gz'),
    exportBtn('folded', '/api/v1/merge', { format: 'folded' }, 'profile.folded.txt'),
    exportBtn('SVG', '/api/v1/render.svg', { title: type }, 'flamegraph.svg'));
  host.append(bar, legend, sandwich);
  const flame = new FlameGraph(host, {
    unit,
    onLegend: (items) => legend.replaceChildren(...items.map((p) => h('span', { class: 'swatch', title: `${p.name}: self ${formatValue(p.value, unit)}` },
      h('i', { style: `background:${p.color}` }), p.name))),
    onPick: (n) => { if (n.depth > 0) state.update({ fn: n.name }, { quiet: true }); showSandwich(n.depth > 0 ? n.name : ''); },
    onZoom: (n) => state.update({ zoom: n ? pathOf(m, n.d, n.i) : null }, { quiet: true }),
  });
  flame.setModel(m);
  const zoom = state.getAll('zoom');
  const node = zoom.length ? findPath(m, zoom) : null;
  if (node) flame.zoomTo(node.d, node.i, true);
  ui.flames.explore = flame;

  // The share of the whole merge: the group-by total of the stacks with a matching
  // frame (each stack once), over the flame graph's total.
  let asked = 0;
  let timer = null;
  const askShare = async (text) => {
    const mine = ++asked;
    if (!text) { ui.search = null; share.textContent = ''; return; }
    const [, sampleType] = type.split(':');
    try {
      const ans = await postJSON('/api/v1/query', {
        profile_type: type, selector: selector(), start: range.from, end: range.until,
        group_by: [], function: ignoreCase ? `(?i)${text}` : text,
      });
      if (mine !== asked) return;
      const total = rootTotal(m);
      ui.search = { value: ans.total, share: total ? ans.total / total : 0 };
      share.textContent = `matches: ${pct(ui.search.share)} of total (${formatValue(ans.total, unit)} ${sampleType})`;
    } catch (e) {
      if (mine === asked) share.textContent = e.message;
    }
  };
  const applySearch = (now = false) => {
    const text = search.value.trim();
    flame.setSearch(text, ignoreCase);
    caseBtn.setAttribute('aria-pressed', String(!ignoreCase));
    state.update({ search: text, ic: ignoreCase ? '1' : null }, { quiet: true });
    clearTimeout(timer);
    if (now) askShare(text);
    else timer = setTimeout(() => askShare(text), 250);
  };
  search.addEventListener('input', () => applySearch());
  caseBtn.addEventListener('click', () => { ignoreCase = !ignoreCase; applySearch(true); });
  applySearch(true);

  async function showSandwich(name) {
    sandwich.replaceChildren();
    delete ui.flames.callers;
    delete ui.flames.callees;
    if (!name) return;
    const ans = await getJSON('/api/v1/sandwich', { query: q, ...range, function: name, max_nodes: maxNodes });
    if (!ui.current() || state.get('fn') !== name) return;
    sandwich.append(h('h2', {}, `Sandwich: ${name} `, h('button', {
      type: 'button', onclick: () => { state.update({ fn: null }, { quiet: true }); showSandwich(''); },
    }, 'Close')), h('p', { class: 'legend' },
      `In stacks worth ${formatValue(ans.value, unit)} (${pct(ans.total ? ans.value / ans.total : 0)} of the total): callers above (inverted), callees below, over every stack of the range.`),
    warningsBox(ans.warnings) || '');
    ui.flames.callers = new FlameGraph(sandwich, { unit, inverted: true });
    ui.flames.callers.setModel(dropRoot(decode(ans.callers)));
    ui.flames.callees = new FlameGraph(sandwich, { unit });
    ui.flames.callees.setModel(dropRoot(decode(ans.callees)));
    sandwich.append(h('h2', {}, 'Flame graph'));
  }
  showSandwich(state.get('fn'));
}

function topTable(host, ans, unit) {
  const root = ans.total || 1;
  const rows = ans.functions.map((r) => ({ ...r, selfShare: r.self / root, totalShare: r.total / root }));
  host.append(h('h2', { style: 'margin-top:0' }, 'Top functions'));
  const table = new DataTable(host, {
    label: 'functions', filterKey: 'name', sort: { key: 'self', desc: true },
    columns: [
      { key: 'name', label: 'Function', middle: 44 },
      { key: 'self', label: 'Self', num: true, format: (v) => formatValue(v, unit) },
      { key: 'selfShare', label: 'Self %', num: true, format: pct, bar: true },
      { key: 'total', label: 'Total', num: true, format: (v) => formatValue(v, unit) },
      { key: 'totalShare', label: 'Total %', num: true, format: pct },
    ],
    onRow: (r) => state.update({ search: `^${reEscape(r.name)}$`, fn: r.name, ic: null }, { push: true }),
  });
  table.set(rows);
}
