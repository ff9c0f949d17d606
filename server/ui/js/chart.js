// A profile's value over time as an area chart on a canvas, drawn as a rate (cores
// for CPU time, bytes/s for allocations); drag across it to pick a range.
import { h, tooltip } from './dom.js';
import { formatTime, formatValue, rateOf } from './format.js';

const PAD = { l: 74, r: 10, t: 8, b: 20 };

export class TimeChart {
  /**
   * `onSelect(fromMs, untilMs)` after a drag; `type` (the profile type) picks the
   * rate and its unit; `small` draws a sparkline without axes text.
   */
  constructor(host, { onSelect, type, small = false }) {
    this.onSelect = onSelect;
    this.unit = (type || '').split(':')[2] || 'count';
    this.rate = rateOf(type);
    this.small = small;
    this.canvas = h('canvas', { 'aria-label': `${this.rate.label} over time${onSelect ? ': drag to zoom into a range' : ''}` });
    this.host = h('div', { class: small ? 'chart small' : 'chart' }, this.canvas);
    host.append(this.host);
    this.points = [];
    this.drag = null;
    this.canvas.addEventListener('mousedown', (e) => { if (this.onSelect) this.drag = { a: e.offsetX, b: e.offsetX }; });
    this.canvas.addEventListener('mousemove', (e) => this.move(e));
    this.canvas.addEventListener('mouseleave', () => tooltip(null));
    window.addEventListener('mouseup', (e) => this.up(e));
    new ResizeObserver(() => this.draw()).observe(this.host);
  }

  /**
   * `points`: `[[ms, total], …]` on the step grid of `stepMs`, drawn as the rate
   * total ÷ step; `range`: the `[from, until)` shown.
   */
  set(points, range, stepMs) {
    const secs = Math.max(stepMs, 1) / 1000;
    this.totals = points;
    this.points = points.map(([t, v]) => [t, this.rate.per(v, secs)]);
    this.range = range;
    this.stepMs = stepMs;
    this.draw();
  }

  /** The rates drawn, `[[ms, rate], …]` (tests read this). */
  rates() {
    return this.points;
  }

  xOf(t, W) {
    const [a, b] = this.range;
    const pad = this.pad || PAD;
    return pad.l + ((t - a) / (b - a)) * (W - pad.l - pad.r);
  }

  tOf(x, W) {
    const [a, b] = this.range;
    const pad = this.pad || PAD;
    return a + ((x - pad.l) / (W - pad.l - pad.r)) * (b - a);
  }

  draw() {
    if (!this.range) return;
    const W = this.host.clientWidth, H = this.host.clientHeight;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.width = W * dpr;
    this.canvas.height = H * dpr;
    const ctx = this.canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const css = getComputedStyle(document.documentElement);
    const color = (v) => css.getPropertyValue(v).trim();
    const pad = this.small ? { l: 4, r: 4, t: 4, b: 4 } : PAD;
    this.pad = pad;
    const peak = Math.max(0, ...this.points.map((p) => p[1]));
    const max = peak > 0 ? niceCeil(peak) : 1;
    const y = (v) => H - pad.b - (v / max) * (H - pad.t - pad.b);
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = color('--muted');
    ctx.strokeStyle = color('--line');
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    if (peak <= 0) {
      // No axis made up from nothing: say there is no data.
      ctx.textAlign = 'center';
      ctx.fillText('No samples in this range', W / 2, H / 2);
      return;
    }
    if (!this.small) {
      for (const f of [0, 0.5, 1]) {
        ctx.fillText(this.rate.format(max * f), pad.l - 6, y(max * f));
        ctx.beginPath(); ctx.moveTo(pad.l, y(max * f)); ctx.lineTo(W - pad.r, y(max * f)); ctx.stroke();
      }
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'alphabetic';
    const ticks = this.small ? -1 : Math.max(2, Math.floor((W - pad.l) / 160));
    // Over a year the labels need the year; otherwise month-day and time.
    const long = this.range[1] - this.range[0] > 300 * 86400e3;
    for (let k = 0; k <= ticks; k++) {
      const t = this.range[0] + ((this.range[1] - this.range[0]) * k) / ticks;
      ctx.textAlign = k === 0 ? 'left' : k === ticks ? 'right' : 'center';
      const label = long ? formatTime(t, false).slice(0, 10) : formatTime(t, false).slice(5);
      ctx.fillText(label, k === 0 ? pad.l : k === ticks ? W - pad.r : this.xOf(t, W), H - 5);
    }
    if (this.points.length) {
      ctx.beginPath();
      ctx.moveTo(this.xOf(this.points[0][0], W), y(0));
      for (const [t, v] of this.points) ctx.lineTo(this.xOf(t, W), y(v));
      ctx.lineTo(this.xOf(this.points[this.points.length - 1][0], W), y(0));
      ctx.fillStyle = color('--chart-fill');
      ctx.fill();
      ctx.beginPath();
      this.points.forEach(([t, v], k) => (k ? ctx.lineTo : ctx.moveTo).call(ctx, this.xOf(t, W), y(v)));
      ctx.strokeStyle = color('--chart');
      ctx.lineWidth = 1.5;
      ctx.stroke();
      ctx.lineWidth = 1;
      // Sparse data (a few uploads in a long range) would be invisible as a line.
      if (this.points.filter((p) => p[1] > 0).length < 8) {
        ctx.fillStyle = color('--chart');
        for (const [t, v] of this.points) if (v > 0) ctx.fillRect(this.xOf(t, W) - 2, y(v) - 2, 4, y(0) - y(v) + 2);
      }
    }
    if (this.drag) {
      ctx.fillStyle = color('--select');
      const [a, b] = [this.drag.a, this.drag.b].sort((p, q) => p - q);
      ctx.fillRect(a, pad.t, b - a, H - pad.t - pad.b);
    }
  }

  move(e) {
    if (this.drag) { this.drag.b = e.offsetX; this.draw(); return; }
    if (!this.points.length) return;
    const t = this.tOf(e.offsetX, this.host.clientWidth);
    let k = 0;
    this.points.forEach((p, j) => { if (Math.abs(p[0] - t) < Math.abs(this.points[k][0] - t)) k = j; });
    const [at, rate] = this.points[k];
    tooltip(`${formatTime(at)}: ${this.rate.format(rate)} (${formatValue(this.totals[k][1], this.unit)} in ${this.stepMs / 1000} s)`, e.clientX, e.clientY);
  }

  up() {
    if (!this.drag || !this.onSelect) { this.drag = null; return; }
    const W = this.host.clientWidth;
    const [a, b] = [this.drag.a, this.drag.b].sort((p, q) => p - q);
    this.drag = null;
    this.draw();
    if (b - a < 4) return;
    const clamp = (t) => Math.max(this.range[0], Math.min(this.range[1], Math.round(t)));
    this.onSelect(clamp(this.tOf(a, W)), clamp(this.tOf(b, W)));
  }
}

/** The round number (1, 2, 2.5 or 5 × a power of ten) at or above `v`. */
function niceCeil(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
