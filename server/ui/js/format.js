// Number, unit and time formatting.

/** The unit of a profile type `name:sample_type:sample_unit:period_type:period_unit`. */
export function unitOf(profileType) {
  return (profileType || '').split(':')[2] || 'count';
}

// What a person calls a profile type, by `name:sample_type` (then by sample type).
const TYPE_NAMES = {
  'process_cpu:cpu': 'CPU', 'process_cpu:samples': 'CPU samples', 'wall:wall': 'Wall time',
  'wall:samples': 'Wall samples', 'memory:alloc_space': 'Allocated bytes',
  'memory:alloc_objects': 'Allocated objects', 'memory:inuse_space': 'In-use bytes',
  'memory:inuse_objects': 'In-use objects', 'memory:alloc_in_new_tlab_bytes': 'Allocated bytes (in new TLABs)',
  'memory:alloc_in_new_tlab_objects': 'Allocations (in new TLABs)',
  'memory:alloc_outside_tlab_bytes': 'Allocated bytes (outside TLABs)',
  'memory:alloc_outside_tlab_objects': 'Allocations (outside TLABs)',
  'memory:alloc_sample_bytes': 'Allocated bytes (sampled)', 'memory:alloc_sample_objects': 'Allocations (sampled)',
  'memory:live': 'Live objects', 'mutex:contentions': 'Lock contentions', 'mutex:delay': 'Lock wait time',
  'block:contentions': 'Blocking events', 'block:delay': 'Blocked time', 'goroutines:goroutine': 'Goroutines',
  'goroutine:goroutine': 'Goroutines', 'off_cpu:events': 'Off-CPU time', 'cycles:cycles': 'CPU cycles',
  'instructions:instructions': 'Instructions',
};

/** `CPU`, `Allocated bytes`, … for a profile type id; the id's parts when unknown. */
export function typeName(id) {
  const [name = '', sampleType = '', unit = ''] = (id || '').split(':');
  return TYPE_NAMES[`${name}:${sampleType}`] || (sampleType ? `${name} ${sampleType} (${unit})` : id || '');
}

/** Friendly names of a list of type ids, the id added where two would read the same. */
export function typeNames(ids) {
  const count = new Map();
  for (const id of ids) count.set(typeName(id), (count.get(typeName(id)) || 0) + 1);
  return ids.map((id) => (count.get(typeName(id)) > 1 ? `${typeName(id)} · ${id}` : typeName(id)));
}

/**
 * `long…name` with the middle left out so the start (package) and the end (the
 * function) both show; `max` characters at most.
 */
export function middle(text, max) {
  const s = String(text);
  if (max < 3) return s.length > max ? '…'.slice(0, max) : s;
  if (s.length <= max) return s;
  const tail = Math.ceil((max - 1) * 0.55);
  return `${s.slice(0, max - 1 - tail)}…${s.slice(s.length - tail)}`;
}

/**
 * The rate a total per step of profile type `type` stands for, in a person's unit:
 * CPU nanoseconds per second are cores (wall time: threads), bytes per second
 * `B/s`, counts per second `/s`.
 */
export function rateOf(type) {
  const [name, , unit] = (type || '').split(':');
  // Small rates keep two significant digits rather than reading 0.00.
  const num = (r) => (r !== 0 && Math.abs(r) < 0.01 ? r.toPrecision(2) : trim(r));
  const ns = (label) => ({ per: (v, secs) => v / 1e9 / secs, format: (r) => `${num(r)} ${label}`, label });
  if (unit === 'nanoseconds') return ns(name === 'process_cpu' ? 'cores' : name === 'wall' ? 'threads' : 's/s');
  if (unit === 'bytes') return { per: (v, secs) => v / secs, format: (r) => `${formatValue(r, 'bytes')}/s`, label: 'bytes/s' };
  return { per: (v, secs) => v / secs, format: (r) => `${formatValue(r, 'count')}/s`, label: `${unit}/s` };
}

const SCALES = {
  nanoseconds: [[3600e9, 'h'], [60e9, 'min'], [1e9, 's'], [1e6, 'ms'], [1e3, 'µs'], [1, 'ns']],
  microseconds: [[1e6, 's'], [1e3, 'ms'], [1, 'µs']],
  milliseconds: [[1e3, 's'], [1, 'ms']],
  bytes: [[2 ** 40, 'TiB'], [2 ** 30, 'GiB'], [2 ** 20, 'MiB'], [2 ** 10, 'KiB'], [1, 'B']],
};

/** `1.23 s`, `45.6 MiB`, `12.3k` for a value in the profile type's unit. */
export function formatValue(v, unit) {
  const scales = SCALES[unit];
  const a = Math.abs(v);
  if (scales) {
    for (const [f, s] of scales) if (a >= f) return `${trim(v / f)} ${s}`;
    return `${v} ${scales[scales.length - 1][1]}`;
  }
  for (const [f, s] of [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']]) if (a >= f) return `${trim(v / f)}${s}`;
  return String(Math.round(v * 100) / 100);
}

function trim(x) {
  const a = Math.abs(x);
  return a >= 100 ? x.toFixed(0) : a >= 10 ? x.toFixed(1) : x.toFixed(2);
}

/** A share in [0, 1] as a percentage with sensible precision. */
export function pct(share) {
  const p = share * 100;
  const a = Math.abs(p);
  return `${a >= 10 ? p.toFixed(1) : a >= 0.1 ? p.toFixed(2) : p.toFixed(3)}%`;
}

/** A signed percentage-point change. */
export function pp(delta) {
  const p = delta * 100;
  return `${p > 0 ? '+' : ''}${p.toFixed(2)} pp`;
}

/** Local time `2026-11-23 16:40:12` of ms since the epoch. */
export function formatTime(ms, withSeconds = true) {
  const d = new Date(ms);
  const p = (n) => String(n).padStart(2, '0');
  const s = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
  return withSeconds ? `${s}:${p(d.getSeconds())}` : s;
}

/** A time for a link: RFC 3339 in UTC (`2026-11-29T07:15:00Z`; ms only when set). */
export function linkTime(ms) {
  return new Date(Math.round(Number(ms))).toISOString().replace('.000Z', 'Z');
}

/** `value` for an `<input type=datetime-local>` from ms. */
export function toLocalInput(ms) {
  return formatTime(ms, true).replace(' ', 'T');
}

const UNITS = { ms: 1, s: 1e3, m: 60e3, h: 3600e3, d: 86400e3, w: 604800e3 };

/** Resolves `now`, `now-1h`, ms or s since the epoch to ms (as the server does). */
export function resolveTime(text, now = Date.now()) {
  const t = String(text).trim();
  const rel = /^now(?:([+-])(\d+)(ms|s|m|h|d|w))?$/.exec(t);
  if (rel) {
    if (!rel[1]) return now;
    const off = Number(rel[2]) * UNITS[rel[3]];
    return rel[1] === '-' ? now - off : now + off;
  }
  if (/^\d+$/.test(t)) {
    const n = Number(t);
    return t.length <= 10 ? n * 1000 : t.length <= 13 ? n : Math.floor(n / 1e3 ** Math.ceil((t.length - 13) / 3));
  }
  const d = Date.parse(t);
  if (Number.isNaN(d)) throw new Error(`cannot read the time ${JSON.stringify(t)}: use now-1h, ms since the epoch or a date`);
  return d;
}

/** A step (s) giving about `points` points over `[from, until)` ms, on a round grid. */
export function stepFor(from, until, points = 240) {
  const want = Math.max(1, (until - from) / 1000 / points);
  const grid = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  return grid.find((g) => g >= want) || 86400 * Math.ceil(want / 86400);
}

/** Escapes a label value for a `{name="value"}` matcher. */
export function quote(v) {
  return `"${String(v).replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

/** Escapes regex metacharacters so a function name matches literally. */
export function reEscape(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
