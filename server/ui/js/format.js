// Number, unit and time formatting.

/** The unit of a profile type `name:sample_type:sample_unit:period_type:period_unit`. */
export function unitOf(profileType) {
  return (profileType || '').split(':')[2] || 'count';
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
