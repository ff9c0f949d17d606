// Labels: the selection broken down by one label — a small rate chart per value
// (`/api/v1/timeseries?group_by=<label>`), largest first, as Grafana's Profiles
// Drilldown shows it. A chart opens Explore filtered to its value.
import { h, warningsBox } from './dom.js';
import { getJSON, query } from './api.js';
import * as state from './state.js';
import { header, selector } from './controls.js';
import { TimeChart } from './chart.js';
import { formatValue, middle, pct, quote, rateOf, stepFor } from './format.js';

/** Values shown per label (the largest by total). */
const LIMIT = 24;

export async function render(root, ui) {
  const { from, until, top, type, unit } = await header(root);
  if (!type) {
    root.append(h('p', { class: 'muted' }, 'No profiles in this range.'));
    return;
  }
  const names = (await getJSON('/api/v1/labels', { query: query(type, selector()), from, until }))
    .filter((n) => !n.startsWith('__'));
  if (!ui.current()) return;
  const label = state.get('label', names.find((n) => n !== 'service_name') || names[0] || '');
  const pick = h('select', {
    'aria-label': 'Break down by label',
    onchange: () => state.update({ label: pick.value }, { push: true }),
  }, names.map((n) => h('option', { value: n, selected: n === label }, n)));
  top.append(h('div', { class: 'toolbar' }, h('label', {}, 'Break down by', pick)));
  if (!label) {
    root.append(h('p', { class: 'muted' }, 'The selection has no labels to break down by.'));
    return;
  }
  const step = stepFor(from, until, 120);
  const ans = await getJSON('/api/v1/timeseries', {
    query: query(type, selector()), from, until, step, group_by: label, limit: LIMIT,
  });
  if (!ui.current()) return;
  const box = warningsBox(ans.warnings);
  if (box) root.append(box);
  const all = ans.series.reduce((s, x) => s + x.total, 0) || 1;
  const rate = rateOf(type);
  const secs = (until - from) / 1000;
  root.append(h('p', { class: 'muted', 'aria-label': 'Breakdown summary' },
    `${ans.series.length} value${ans.series.length === 1 ? '' : 's'} of ${label}`
    + `${ans.series.length === LIMIT ? ` (the ${LIMIT} largest)` : ''} · click one to explore it`));
  const grid = h('div', { class: 'breakdown', 'aria-label': `Breakdown by ${label}` });
  root.append(grid);
  ui.breakdown = [];
  for (const s of ans.series) {
    const value = s.labels[label] ?? '';
    const open = () => state.navigate(exploreLink(label, value));
    const cell = h('div', {
      class: 'cell', tabindex: 0, role: 'link', 'aria-label': `${label}=${value}`,
      onclick: open, onkeydown: (e) => { if (e.key === 'Enter') open(); },
    }, h('header', {},
      h('b', { title: value }, middle(value || '(none)', 36)),
      h('span', { class: 'num', title: `${formatValue(s.total, unit)} in the range` },
        `${rate.format(rate.per(s.total, secs))} · ${pct(s.total / all)}`)));
    grid.append(cell);
    new TimeChart(cell, { type, small: true }).set(s.points, [from, until], ans.step_ms);
    ui.breakdown.push({ value, total: s.total, share: s.total / all });
  }
  ui.mark('breakdownDrawn');
}

/** Explore narrowed to one value of the label (the service picker for `service_name`). */
function exploreLink(label, value) {
  const keep = {
    type: state.get('type'), sel: state.get('sel'), from: state.get('from'), until: state.get('until'),
    service: state.get('service'), m: state.getAll('m'),
  };
  if (label === 'service_name') keep.service = value;
  else keep.m = [...keep.m, `${label}=${quote(value)}`];
  return state.link('explore', keep);
}
