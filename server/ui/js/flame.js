// The flame graph on a canvas (icicle: root on top, or at the bottom when inverted).
// Drawing walks each level once, from the first node right of the view's start, and
// skips nodes under half a pixel, so thousands of nodes redraw within a frame; zoom
// animates the visible x range.
import { h, tooltip } from './dom.js';
import { formatValue, middle, pct } from './format.js';
import { rootTotal, search, searchRegex, nodeCount, packageOf, packageTotals } from './flamemodel.js';

const ROW = 18;
const ZOOM_MS = 180;

function hash(s) {
  let x = 2166136261;
  for (let i = 0; i < s.length; i++) x = Math.imul(x ^ s.charCodeAt(i), 16777619);
  return x >>> 0;
}

// Distinct hues for the largest packages, light enough for dark text.
const PALETTE = [
  'hsl(28, 85%, 62%)', 'hsl(200, 65%, 62%)', 'hsl(120, 45%, 58%)', 'hsl(350, 70%, 68%)',
  'hsl(50, 85%, 58%)', 'hsl(265, 50%, 70%)', 'hsl(170, 50%, 55%)', 'hsl(15, 60%, 72%)',
  'hsl(85, 55%, 58%)', 'hsl(225, 55%, 72%)', 'hsl(320, 45%, 70%)', 'hsl(190, 40%, 70%)',
];

// Package → colour for the whole page: the first graph drawn (the view's main
// one) hands the palette to its largest packages, and every graph after it (the
// sandwich) reuses those colours, so a package reads as one colour everywhere.
const assigned = new Map();
const GREY = 'hsl(220, 8%, 72%)';

function colorOf(p) {
  if (!assigned.has(p)) {
    const x = hash(p);
    assigned.set(p, assigned.size < PALETTE.length ? PALETTE[assigned.size] : `hsl(${x % 360}, 25%, ${68 + ((x >> 9) % 10)}%)`);
  }
  return assigned.get(p);
}

/**
 * Colours by package (see `packageOf`), the synthetic root and `other` frames
 * grey; answers the colour per name and the legend (the model's largest packages).
 */
export function packageColors(m) {
  const synthetic = (n, k) => k === 0 || n === 'other';
  const ranked = packageTotals(m).filter(([p]) => p !== '');
  ranked.forEach(([p]) => colorOf(p));
  const legend = ranked.slice(0, PALETTE.length).map(([p, v]) => ({ name: p, color: colorOf(p), value: v }));
  const byName = m.names.map((n, k) => {
    if (synthetic(n, k)) return GREY;
    const p = packageOf(n);
    return p ? colorOf(p) : 'hsl(30, 20%, 75%)';
  });
  return { byName, legend };
}

/** Red where the node's share grew, blue where it shrank, grey when unchanged. */
function diffColor(m, l, i) {
  const sl = m.leftTicks ? l.lt[i] / m.leftTicks : 0;
  const sr = m.rightTicks ? l.rt[i] / m.rightTicks : 0;
  const rel = sl === 0 ? (sr > 0 ? 1 : 0) : Math.max(-1, Math.min(1, (sr - sl) / sl));
  const a = Math.abs(rel);
  if (a < 0.02) return 'hsl(220, 6%, 78%)';
  return `hsl(${rel > 0 ? 2 : 218}, ${55 + 35 * a}%, ${84 - 34 * a}%)`;
}

export class FlameGraph {
  /**
   * `opts`: `unit` (for values), `inverted` (callers view), `onPick(node)` after a click,
   * `onZoom(node)` when the zoomed node changes.
   */
  constructor(host, opts = {}) {
    this.opts = opts;
    this.canvas = h('canvas', {
      tabindex: 0, role: 'img',
      'aria-label': 'Flame graph: click a frame to zoom, Escape to reset, arrow up to zoom out',
    });
    this.host = h('div', { class: 'flame' }, this.canvas);
    host.append(this.host);
    this.m = null;
    this.focus = { d: 0, i: 0 };
    this.view = [0, 1];
    this.marks = null;
    this.searchResult = null;
    this.drawMs = [];
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => tooltip(null));
    this.canvas.addEventListener('click', (e) => this.click(e));
    this.canvas.addEventListener('keydown', (e) => this.key(e));
    new ResizeObserver(() => this.draw()).observe(this.host);
  }

  setModel(m) {
    this.m = m;
    // Colours are fixed per model: by package, or per node for a diff.
    if (m.diff) {
      this.colors = m.levels.map((l) => Array.from({ length: l.n }, (_, i) => diffColor(m, l, i)));
      this.legend = [];
    } else {
      const pc = packageColors(m);
      this.colors = pc.byName;
      this.legend = pc.legend;
    }
    if (this.opts.onLegend) this.opts.onLegend(this.legend);
    this.focus = { d: 0, i: 0 };
    this.view = [0, rootTotal(m) || 1];
    this.setSearch(this.searchText || '');
  }

  /**
   * Highlights nodes matching `text` (case-sensitive unless `ignoreCase`); answers
   * their combined share of the drawn root (the page asks the server for the share
   * of the whole merge, which `max_nodes` does not truncate).
   */
  setSearch(text, ignoreCase = this.ignoreCase || false) {
    this.searchText = text;
    this.ignoreCase = ignoreCase;
    const re = searchRegex(text, ignoreCase);
    this.searchResult = re && this.m ? search(this.m, re) : null;
    this.marks = this.searchResult && this.searchResult.marks;
    this.draw();
    return this.searchShare();
  }

  searchShare() {
    return this.searchResult ? this.searchResult.share : null;
  }

  rootTotal() {
    return this.m ? rootTotal(this.m) : 0;
  }

  nodeCount() {
    return this.m ? nodeCount(this.m) : 0;
  }

  /** Zooms so node (d, i) spans the width; animated unless `instant`. */
  zoomTo(d, i, instant = false) {
    const l = this.m.levels[d];
    this.focus = { d, i };
    const to = [l.x[i], l.x[i] + Math.max(l.total[i], 1e-9)];
    if (this.opts.onZoom) this.opts.onZoom(d === 0 ? null : { d, i });
    if (instant || !this.host.isConnected) { this.view = to; this.draw(); return; }
    const from = this.view.slice();
    const t0 = performance.now();
    const step = (now) => {
      const k = Math.min(1, (now - t0) / ZOOM_MS);
      const e = 1 - (1 - k) ** 3;
      this.view = [from[0] + (to[0] - from[0]) * e, from[1] + (to[1] - from[1]) * e];
      this.draw();
      if (k < 1) this.anim = requestAnimationFrame(step);
    };
    cancelAnimationFrame(this.anim);
    this.anim = requestAnimationFrame(step);
  }

  reset() {
    if (this.m) this.zoomTo(0, 0);
  }

  zoomOut() {
    const { d, i } = this.focus;
    if (d > 0) this.zoomTo(d - 1, this.m.levels[d].parent[i]);
  }

  width() {
    return this.host.clientWidth || 800;
  }

  rowY(d) {
    return this.opts.inverted ? (this.m.levels.length - 1 - d) * ROW : d * ROW;
  }

  /** The ancestor of the focus at depth d (< focus depth). */
  ancestor(d) {
    let i = this.focus.i;
    for (let dd = this.focus.d; dd > d; dd--) i = this.m.levels[dd].parent[i];
    return i;
  }

  draw() {
    if (!this.m) return;
    const t0 = performance.now();
    const m = this.m;
    const W = this.width();
    const H = m.levels.length * ROW;
    const dpr = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(W * dpr) || this.canvas.height !== Math.round(H * dpr)) {
      this.canvas.width = Math.round(W * dpr);
      this.canvas.height = Math.round(H * dpr);
      this.canvas.style.height = `${H}px`;
    }
    const ctx = this.canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = '12px ui-monospace, SFMono-Regular, Menlo, monospace';
    ctx.textBaseline = 'middle';
    const cw = ctx.measureText('M').width || 7;
    const [v0, v1] = this.view;
    const scale = W / (v1 - v0);
    const box = (l, d, i, x, w, dim) => {
      const y = this.rowY(d);
      ctx.globalAlpha = dim ? 0.55 : 1;
      ctx.fillStyle = this.color(l, d, i);
      ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
      if (w > 3 * cw) {
        // The middle goes: the package and the function name both stay readable.
        ctx.fillStyle = '#111';
        ctx.fillText(middle(m.names[l.name[i]], Math.floor((w - 6) / cw)), x + 3, y + ROW / 2);
      }
    };
    for (let d = 0; d < this.focus.d; d++) box(m.levels[d], d, this.ancestor(d), 0, W, true);
    for (let d = this.focus.d; d < m.levels.length; d++) {
      const l = m.levels[d];
      let lo = 0, hi = l.n;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (l.x[mid] + l.total[mid] <= v0) lo = mid + 1; else hi = mid; }
      for (let i = lo; i < l.n && l.x[i] < v1; i++) {
        const w = l.total[i] * scale;
        if (w < 0.5) continue;
        box(l, d, i, (l.x[i] - v0) * scale, w, false);
      }
    }
    ctx.globalAlpha = 1;
    this.drawMs.push(performance.now() - t0);
    if (this.drawMs.length > 240) this.drawMs.shift();
    this.drawnAt = performance.now();
  }

  color(l, d, i) {
    if (this.marks) {
      const k = this.marks[d][i];
      return k === 1 ? '#b14ae0' : k === 2 ? '#d9b8ea' : 'hsl(220, 5%, 80%)';
    }
    return this.m.diff ? this.colors[d][i] : this.colors[l.name[i]];
  }

  /** The node under CSS pixel (x, y) of the canvas, or null. */
  nodeAt(x, y) {
    if (!this.m) return null;
    const m = this.m;
    const row = Math.floor(y / ROW);
    const d = this.opts.inverted ? m.levels.length - 1 - row : row;
    if (d < 0 || d >= m.levels.length) return null;
    if (d < this.focus.d) return { d, i: this.ancestor(d) };
    const l = m.levels[d];
    const [v0, v1] = this.view;
    const v = v0 + (x / this.width()) * (v1 - v0);
    for (let i = 0; i < l.n; i++) if (l.x[i] <= v && v < l.x[i] + l.total[i]) return { d, i };
    return null;
  }

  /** What the page shows at (x, y): name, values and shares (tests read this). */
  hitTest(x, y) {
    const n = this.nodeAt(x, y);
    return n && this.describe(n.d, n.i);
  }

  describe(d, i) {
    const m = this.m, l = m.levels[d];
    const root = rootTotal(m);
    const out = {
      name: m.names[l.name[i]], depth: d, total: l.total[i], self: l.self[i],
      share: root ? l.total[i] / root : 0,
    };
    if (m.diff) {
      Object.assign(out, {
        baseTotal: l.lt[i], compareTotal: l.rt[i],
        baseShare: m.leftTicks ? l.lt[i] / m.leftTicks : 0,
        compareShare: m.rightTicks ? l.rt[i] / m.rightTicks : 0,
      });
    }
    return out;
  }

  /** The centre (CSS px) of the widest drawn node named `name`, or null. */
  find(name) {
    if (!this.m) return null;
    const k = this.m.names.indexOf(name);
    const [v0, v1] = this.view;
    const scale = this.width() / (v1 - v0);
    let best = null;
    this.m.levels.forEach((l, d) => {
      if (d < this.focus.d) return;
      for (let i = 0; i < l.n; i++) {
        if (l.name[i] !== k || l.x[i] + l.total[i] <= v0 || l.x[i] >= v1) continue;
        const x0 = Math.max(0, (l.x[i] - v0) * scale), x1 = Math.min(this.width(), (l.x[i] + l.total[i] - v0) * scale);
        if (!best || x1 - x0 > best.w) best = { x: (x0 + x1) / 2, y: this.rowY(d) + ROW / 2, w: x1 - x0, d, i };
      }
    });
    return best;
  }

  hover(e) {
    const n = this.nodeAt(e.offsetX, e.offsetY);
    if (!n) { tooltip(null); return; }
    const info = this.describe(n.d, n.i);
    const u = this.opts.unit;
    const pkg = n.d > 0 ? packageOf(info.name) : '';
    const lines = [h('b', {}, info.name), h('br'), pkg ? [h('span', { class: 'muted-tip' }, `package ${pkg}`), h('br')] : null];
    if (this.m.diff) {
      lines.push(`base ${pct(info.baseShare)} (${formatValue(info.baseTotal, u)}) → compare ${pct(info.compareShare)} (${formatValue(info.compareTotal, u)})`);
    } else {
      lines.push(`total ${formatValue(info.total, u)} (${pct(info.share)}), self ${formatValue(info.self, u)}`);
      const f = this.focus;
      if (f.d > 0) lines.push(h('br'), `${pct(info.total / this.m.levels[f.d].total[f.i])} of the zoomed frame`);
    }
    tooltip(h('span', {}, lines), e.clientX, e.clientY);
  }

  click(e) {
    const n = this.nodeAt(e.offsetX, e.offsetY);
    if (!n) return;
    this.zoomTo(n.d, n.i);
    if (this.opts.onPick) this.opts.onPick(this.describe(n.d, n.i));
  }

  key(e) {
    if (e.key === 'Escape') this.reset();
    else if (e.key === 'ArrowUp' || e.key === 'Backspace') this.zoomOut();
    else return;
    e.preventDefault();
  }

  /**
   * Zooms in and out of the `count` widest deep nodes for `frames` animation frames and
   * answers frames per second and the mean draw time (the bench reads this).
   */
  benchZoom(frames = 120) {
    const targets = [];
    this.m.levels.forEach((l, d) => { for (let i = 0; i < l.n; i++) if (d > 2) targets.push([l.total[i], d, i]); });
    targets.sort((a, b) => b[0] - a[0]);
    const pick = targets.slice(0, 16);
    this.drawMs = [];
    return new Promise((resolve) => {
      let n = 0;
      const t0 = performance.now();
      const frame = () => {
        const k = (n % 30) / 30;
        const [, d, i] = pick[Math.floor(n / 30) % Math.max(pick.length, 1)] || [0, 0, 0];
        const l = this.m.levels[d];
        const R = rootTotal(this.m);
        const e = k < 0.5 ? k * 2 : 2 - k * 2;
        this.view = [l.x[i] * e, R + (l.x[i] + l.total[i] - R) * e];
        this.draw();
        if (++n < frames) requestAnimationFrame(frame);
        else {
          const secs = (performance.now() - t0) / 1000;
          const mean = this.drawMs.reduce((a, b) => a + b, 0) / this.drawMs.length;
          this.view = [0, R];
          this.focus = { d: 0, i: 0 };
          this.draw();
          resolve({ frames, seconds: secs, fps: frames / secs, drawMsMean: mean, nodes: this.nodeCount() });
        }
      };
      requestAnimationFrame(frame);
    });
  }
}
