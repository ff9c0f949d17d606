// Query controls shared by Explore, Compare and Group by: profile type, service, label
// filters with autocompletion, and time ranges. All of it is read from and written to
// the URL (state.js); a change re-renders the view.
import { h } from './dom.js';
import { getJSON, query } from './api.js';
import * as state from './state.js';
import { linkTime, quote, resolveTime, typeNames, unitOf } from './format.js';

export const PRESETS = [
  ['now-15m', 'Last 15 minutes'], ['now-1h', 'Last hour'], ['now-6h', 'Last 6 hours'],
  ['now-24h', 'Last 24 hours'], ['now-7d', 'Last 7 days'], ['now-30d', 'Last 30 days'],
];

const HIDDEN_LABELS = new Set(['__name__', '__profile_type__', 'service_name']);
let uid = 0;

/** `{service_name="…",env="prod"}` from the URL's service and matchers. */
export function selector(extra = []) {
  // A whole selector in `sel` (alert links carry their rule's) joins the pickers' matchers.
  const whole = state.get('sel').trim().replace(/^\{|\}$/g, '').trim();
  const parts = whole ? [whole] : [];
  const service = state.get('service');
  if (service) parts.push(`service_name=${quote(service)}`);
  parts.push(...state.getAll('m'), ...extra);
  return `{${parts.join(',')}}`;
}

/** The `[from, until)` ms of a range kept in the URL under `fromKey`/`untilKey`. */
export function range(fromKey = 'from', untilKey = 'until', fallback = ['now-1h', 'now']) {
  const now = Date.now();
  const from = resolveTime(state.get(fromKey, fallback[0]), now);
  const until = resolveTime(state.get(untilKey, fallback[1]), now);
  if (until <= from) throw new Error(`the range ends (${state.get(untilKey)}) before it starts (${state.get(fromKey)})`);
  return [from, until];
}

function labeled(text, control) {
  return h('label', {}, text, control);
}

function datalist(values) {
  const id = `dl${++uid}`;
  return [id, h('datalist', { id }, values.map((v) => h('option', { value: v })))];
}

/**
 * Renders the profile type and service pickers and the label filters into `host`.
 * Answers `{type, unit}` once the profile types are known (the first CPU-like type
 * is chosen, and written to the URL, when none is).
 */
export async function selection(host, [from, until]) {
  const types = await getJSON('/api/v1/profile_types', { query: '{}', from, until });
  let type = state.get('type');
  if (!type || !types.includes(type)) {
    type = types.find((t) => t.startsWith('process_cpu:cpu:')) || types.find((t) => /cpu/.test(t)) || types[0] || '';
    if (type) state.update({ type }, { quiet: true });
  }
  // Friendly names (CPU, Allocated bytes, …), the id on hover.
  const names = typeNames(types);
  const typeSel = h('select', {
    name: 'type', 'aria-label': 'Profile type', title: type,
    onchange: () => state.update({ type: typeSel.value, zoom: null }, { push: true }),
  }, types.length
    ? types.map((t, k) => h('option', { value: t, title: t, selected: t === type }, names[k]))
    : h('option', { value: '' }, 'no data in range'));
  const serviceSel = h('select', {
    name: 'service', 'aria-label': 'Service',
    onchange: () => state.update({ service: serviceSel.value, zoom: null }, { push: true }),
  }, h('option', { value: '' }, 'all services'));
  const filters = labelFilters(type, [from, until]);
  host.append(h('div', { class: 'toolbar' },
    labeled('Profile type', typeSel), labeled('Service', serviceSel), filters));
  if (type) {
    const services = await getJSON('/api/v1/label_values', { name: 'service_name', query: query(type, '{}'), from, until });
    const current = state.get('service');
    for (const s of services) serviceSel.append(h('option', { value: s, selected: s === current }, s));
    if (current && !services.includes(current)) serviceSel.append(h('option', { value: current, selected: true }, `${current} (no data)`));
  }
  return { type, unit: unitOf(type) };
}

/** Chips for the `m` matchers, and a name/op/value form with autocompleted names and values. */
function labelFilters(type, [from, until]) {
  const matchers = state.getAll('m');
  const [namesId, namesList] = datalist([]);
  const [valuesId, valuesList] = datalist([]);
  const name = h('input', { list: namesId, placeholder: 'label', size: 10, 'aria-label': 'Label name', autocomplete: 'off' });
  const op = h('select', { 'aria-label': 'Matcher' }, ['=', '!=', '=~', '!~'].map((o) => h('option', { value: o }, o)));
  const value = h('input', { list: valuesId, placeholder: 'value', size: 12, 'aria-label': 'Label value', autocomplete: 'off' });
  const sel = selector();
  let namesLoaded = false;
  name.addEventListener('focus', async () => {
    if (namesLoaded || !type) return;
    namesLoaded = true;
    const names = await getJSON('/api/v1/labels', { query: query(type, sel), from, until }).catch(() => []);
    namesList.replaceChildren(...names.filter((n) => !HIDDEN_LABELS.has(n)).map((n) => h('option', { value: n })));
  });
  const loadValues = async () => {
    if (!name.value || !type) return;
    const values = await getJSON('/api/v1/label_values', { name: name.value, query: query(type, sel), from, until }).catch(() => []);
    valuesList.replaceChildren(...values.map((v) => h('option', { value: v })));
  };
  name.addEventListener('change', loadValues);
  value.addEventListener('focus', loadValues);
  const add = (e) => {
    e.preventDefault();
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name.value.trim())) { name.focus(); return; }
    state.update({ m: [...matchers, `${name.value.trim()}${op.value}${quote(value.value)}`], zoom: null }, { push: true });
  };
  const whole = state.get('sel');
  const selChip = whole && h('span', { class: 'chip' }, `selector ${whole}`, h('button', {
    'aria-label': 'Remove the selector', title: 'Remove', onclick: () => state.update({ sel: null }, { push: true }),
  }, '×'));
  const chips = matchers.map((mt, k) => h('span', { class: 'chip' }, mt, h('button', {
    'aria-label': `Remove filter ${mt}`, title: 'Remove',
    onclick: () => state.update({ m: matchers.filter((_, j) => j !== k), zoom: null }, { push: true }),
  }, '×')));
  return h('form', { class: 'toolbar', onsubmit: add, 'aria-label': 'Label filters' },
    h('div', { class: 'chips' }, selChip, chips), namesList, valuesList,
    labeled('Label', name), labeled('Op', op), labeled('Value', value), h('button', { type: 'submit' }, 'Add filter'));
}

/** A range picker over URL keys `fromKey`/`untilKey`: presets and free from/until fields. */
export function timePicker(title, fromKey = 'from', untilKey = 'until', fallback = ['now-1h', 'now']) {
  // Epoch numbers in a link read as dates in the fields.
  const readable = (v) => (/^\d+$/.test(v) ? linkTime(resolveTime(v)) : v);
  const from = readable(state.get(fromKey, fallback[0]));
  const until = readable(state.get(untilKey, fallback[1]));
  const preset = h('select', {
    'aria-label': `${title} preset`,
    onchange: () => preset.value && state.update({ [fromKey]: preset.value, [untilKey]: 'now' }, { push: true }),
  }, h('option', { value: '' }, 'custom'),
  PRESETS.map(([v, label]) => h('option', { value: v, selected: until === 'now' && from === v }, label)));
  const f = h('input', { value: from, size: 16, 'aria-label': `${title} from`, title: 'now-1h, a date, or ms since the epoch' });
  const u = h('input', { value: until, size: 16, 'aria-label': `${title} until`, title: 'now, a date, or ms since the epoch' });
  const apply = (e) => {
    e.preventDefault();
    state.update({ [fromKey]: f.value.trim(), [untilKey]: u.value.trim() }, { push: true });
  };
  return h('form', { class: 'toolbar', onsubmit: apply, 'aria-label': title },
    labeled(title, preset), labeled('From', f), labeled('Until', u), h('button', { type: 'submit' }, 'Apply'));
}

/** The top of a one-range view (Explore, Group by): selection and range picker. */
export async function header(root) {
  const [from, until] = range();
  const top = h('div');
  root.append(top);
  const picked = await selection(top, [from, until]);
  top.append(timePicker('Range'));
  return { from, until, top, ...picked };
}
