// Alerts: every rule of the tenant with its state and why it is in it, the last
// evaluation and figures, and a link to Compare for the two ranges it measured last.
import { h } from './dom.js';
import { getJSON } from './api.js';
import * as state from './state.js';
import { DataTable } from './table.js';
import { formatTime, linkTime, resolveTime } from './format.js';

/**
 * Compare for the ranges of an alert's `links.diff.body` (GET /api/v1/alerts*),
 * with the times readable in the link.
 */
export function compareLink(rule, body) {
  const t = (v) => linkTime(resolveTime(v));
  return state.link('compare', {
    type: body.profile_type, sel: body.selector || rule.selector,
    bfrom: t(body.base.start), buntil: t(body.base.end), cfrom: t(body.compare.start), cuntil: t(body.compare.end),
  });
}

export async function render(root, ui) {
  const { rules } = await getJSON('/api/v1/alerts/rules');
  if (!ui.current()) return;
  root.append(h('h2', {}, `Alert rules (${rules.length})`));
  if (!rules.length) {
    root.append(h('p', { class: 'muted' }, 'No rules for this tenant. Create one with POST /api/v1/alerts/rules (docs/alerts.md).'));
    return;
  }
  const rows = rules.map((r) => ({
    name: r.rule.name,
    state: r.state,
    reason: r.reason || '',
    selector: `${r.rule.profile_type}${r.rule.selector || '{}'}`,
    function: (r.figures && r.figures.function) || (r.rule.watch && r.rule.watch.function) || '',
    value: r.figures ? r.figures.value : null,
    threshold: r.figures ? r.figures.threshold : null,
    last: r.last_evaluation ? formatTime(Date.parse(r.last_evaluation)) : 'never',
    error: r.last_error || '',
    links: r.links,
    rule: r.rule,
  }));
  new DataTable(root, {
    label: 'rules', filterKey: 'name', sort: { key: 'name', desc: false },
    columns: [
      { key: 'name', label: 'Rule' },
      {
        key: 'state', label: 'State', wrap: true,
        format: (v, r) => h('span', {}, h('span', { class: `state-${v}` }, v), r.reason ? [h('br'), h('span', { class: 'reason' }, r.reason)] : null),
      },
      { key: 'function', label: 'Watches' },
      { key: 'value', label: 'Value', num: true, format: (v, r) => (v === null ? '–' : `${Number(v).toFixed(2)} (threshold ${r.threshold})`) },
      { key: 'last', label: 'Last evaluation' },
      {
        key: 'links', label: 'Diff',
        format: (l, r) => (l ? h('span', {},
          h('a', { href: compareLink(r.rule, l.diff.body), 'data-route': '', class: 'compare-link' }, 'Compare'),
          ' · ', h('a', { href: l.diff_flamegraph_svg, target: '_blank', rel: 'noopener' }, 'SVG'))
          : (r.error || 'not evaluated yet')),
      },
    ],
  }).set(rows);
  ui.mark('alertsDrawn');
}
