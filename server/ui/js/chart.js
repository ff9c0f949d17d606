// The total over time as an area chart on a canvas; drag across it to pick a range.
import { h, tooltip } from './dom.js';
import { formatTime, formatValue } from './format.js';

const PAD = { l: 64, r: 10, t: 8, b: 20 };

export class TimeChart {
  /** `onSelect(fromMs, untilMs)` after a drag; `unit` formats the y axis. */
  constructor(host, { onSelect, unit }) {
    this.onSelect = onSelect;
    this.unit = unit;
    this.canvas = h('canvas', { 'aria-label': 'Total over time: drag to zoom into a range' });
    this.host = h('div', { class: 'chart' }, this.canvas);
    host.append(this.host);
    this.points = [];
    this.drag = null;
    this.canvas.addEventListener('mousedown', (e) => { this.drag = { a: e.offsetX, b: e.offsetX }; });
    this.canvas.addEventListener('mousemove', (e) => this.move(e));
    this.canvas.addEventListener('mouseleave', () => tooltip(null));
    window.addEventListener('mouseup', (e) => this.up(e));
    new ResizeObserver(() => this.draw()).observe(this.host);
  }

  /** `points`: `[[ms, value], …]` on the step grid; `range`: the `[from, until)` shown. */
  set(points, range, stepMs) {
    this.points = points;
    this.range = range;
    this.stepMs = stepMs;
    this.draw();
  }

  xOf(t, W) {
    const [a, b] = this.range;
    return PAD.l + ((t - a) / (b - a)) * (W - PAD.l - PAD.r);
  }

  tOf(x, W) {
    const [a, b] = this.range;
    return a + ((x - PAD.l) / (W - PAD.l - PAD.r)) * (b - a);
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
    const max = Math.max(1, ...this.points.map((p) => p[1]));
    const y = (v) => H - PAD.b - (v / max) * (H - PAD.t - PAD.b);
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = color('--muted');
    ctx.strokeStyle = color('--line');
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    for (const f of [0, 0.5, 1]) {
      ctx.fillText(formatValue(max * f, this.unit), PAD.l - 6, y(max * f));
      ctx.beginPath(); ctx.moveTo(PAD.l, y(max * f)); ctx.lineTo(W - PAD.r, y(max * f)); ctx.stroke();
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'alphabetic';
    const ticks = Math.max(2, Math.floor((W - PAD.l) / 160));
    // Over a year the labels need the year; otherwise month-day and time.
    const long = this.range[1] - this.range[0] > 300 * 86400e3;
    for (let k = 0; k <= ticks; k++) {
      const t = this.range[0] + ((this.range[1] - this.range[0]) * k) / ticks;
      ctx.textAlign = k === 0 ? 'left' : k === ticks ? 'right' : 'center';
      const label = long ? formatTime(t, false).slice(0, 10) : formatTime(t, false).slice(5);
      ctx.fillText(label, k === 0 ? PAD.l : k === ticks ? W - PAD.r : this.xOf(t, W), H - 5);
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
      ctx.fillRect(a, PAD.t, b - a, H - PAD.t - PAD.b);
    }
  }

  move(e) {
    if (this.drag) { this.drag.b = e.offsetX; this.draw(); return; }
    if (!this.points.length) return;
    const t = this.tOf(e.offsetX, this.host.clientWidth);
    let best = this.points[0];
    for (const p of this.points) if (Math.abs(p[0] - t) < Math.abs(best[0] - t)) best = p;
    tooltip(`${formatTime(best[0])}: ${formatValue(best[1], this.unit)}`, e.clientX, e.clientY);
  }

  up() {
    if (!this.drag) return;
    const W = this.host.clientWidth;
    const [a, b] = [this.drag.a, this.drag.b].sort((p, q) => p - q);
    this.drag = null;
    this.draw();
    if (b - a < 4) return;
    const clamp = (t) => Math.max(this.range[0], Math.min(this.range[1], Math.round(t)));
    this.onSelect(clamp(this.tOf(a, W)), clamp(this.tOf(b, W)));
  }
}
