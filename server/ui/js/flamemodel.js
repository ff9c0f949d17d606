// The flame graph as arrays per depth, decoded from the API's `levels` encoding
// (docs/api.md: `[x_delta, total, self, name]` per node, 7-tuples for a diff), and
// the derived views: top functions, search matches, sandwich trees.
//
// A level is a struct of typed arrays ordered by x: x, total, self, name (index into
// `names`), parent (index in the level above); a diff level also keeps each side's
// total and self. Nothing here touches the DOM.

/** Decodes `{names, levels, total}` (or a diff's `{…, leftTicks, rightTicks}`). */
export function decode(fg, diff = false) {
  const stride = diff ? 7 : 4;
  const levels = fg.levels.map((row) => {
    const n = row.length / stride;
    const l = newLevel(n, diff);
    let end = 0, endL = 0, endR = 0;
    for (let i = 0; i < n; i++) {
      const o = i * stride;
      if (diff) {
        const xl = endL + Number(row[o]), tl = Number(row[o + 1]);
        const xr = endR + Number(row[o + 3]), tr = Number(row[o + 4]);
        endL = xl + tl; endR = xr + tr;
        l.x[i] = xl + xr; l.total[i] = tl + tr;
        l.self[i] = Number(row[o + 2]) + Number(row[o + 5]);
        l.lt[i] = tl; l.rt[i] = tr; l.ls[i] = Number(row[o + 2]); l.rs[i] = Number(row[o + 5]);
        l.name[i] = row[o + 6];
      } else {
        const x = end + Number(row[o]), t = Number(row[o + 1]);
        end = x + t;
        l.x[i] = x; l.total[i] = t; l.self[i] = Number(row[o + 2]); l.name[i] = row[o + 3];
      }
    }
    return l;
  });
  const m = {
    names: fg.names, levels, diff,
    leftTicks: Number(fg.leftTicks || 0), rightTicks: Number(fg.rightTicks || 0),
  };
  link(m);
  return m;
}

function newLevel(n, diff) {
  const l = {
    n, x: new Float64Array(n), total: new Float64Array(n), self: new Float64Array(n),
    name: new Int32Array(n), parent: new Int32Array(n), first: new Int32Array(n), count: new Int32Array(n),
  };
  if (diff) Object.assign(l, { lt: new Float64Array(n), rt: new Float64Array(n), ls: new Float64Array(n), rs: new Float64Array(n) });
  return l;
}

/**
 * The model without its synthetic root when that root has one child (a sandwich's
 * `total` above the function): the function becomes the root.
 */
export function dropRoot(m) {
  if (m.levels.length < 2 || m.levels[1].n !== 1) return m;
  const levels = m.levels.slice(1);
  for (const l of levels) { l.first.fill(0); l.count.fill(0); l.parent.fill(0); }
  const out = { ...m, levels };
  link(out);
  return out;
}

/** Fills parent and child ranges: children of a node are contiguous in the level below. */
function link(m) {
  for (let d = 1; d < m.levels.length; d++) {
    const up = m.levels[d - 1], l = m.levels[d];
    let j = 0;
    for (let i = 0; i < l.n; i++) {
      while (j < up.n - 1 && up.x[j] + up.total[j] <= l.x[i]) j++;
      l.parent[i] = j;
      if (up.count[j] === 0) up.first[j] = i;
      up.count[j]++;
    }
  }
}

/**
 * The package or module a frame belongs to, which its colour follows: Go
 * `github.com/a/b.(*T).F` → `github.com/a/b`, `runtime.mallocgc` → `runtime`; Java
 * `java/lang/Thread.run` or `java.lang.Thread.run` → `java/lang` / `java.lang`;
 * Rust and C++ `std::io::read` → `std`; Python and Ruby `app/db.py:12 - query` →
 * `app/db.py`. A bare name (a C function) has none: ''.
 */
export function packageOf(name) {
  const n = String(name).replace(/^[<(&*]+/, '');
  const file = /^(.*?\.(?:py|rb|js|ts|php)):/.exec(n);
  if (file) return file[1];
  if (n.includes('::')) return n.split('::')[0];
  const slash = n.lastIndexOf('/');
  if (slash >= 0) {
    const last = n.slice(slash + 1);
    // Java's `/`-separated class names: the class starts in upper case.
    if (/^[A-Z$]/.test(last)) return n.slice(0, slash);
    const dot = last.indexOf('.');
    return dot >= 0 ? n.slice(0, slash + 1 + dot) : n.slice(0, slash);
  }
  const parts = n.split('.');
  if (parts.length < 2) return '';
  // Dotted Java: the segments before the class (upper case); Go: the first segment.
  const cls = parts.findIndex((p) => /^[A-Z]/.test(p));
  return cls > 0 ? parts.slice(0, cls).join('.') : parts[0];
}

/** Value per package (self values summed), largest first: `[[package, value], …]`. */
export function packageTotals(m) {
  const by = new Map();
  const pkgOfName = m.names.map((n) => (n === 'other' ? '' : packageOf(n)));
  for (let d = 1; d < m.levels.length; d++) {
    const l = m.levels[d];
    for (let i = 0; i < l.n; i++) {
      const p = pkgOfName[l.name[i]];
      by.set(p, (by.get(p) || 0) + l.self[i]);
    }
  }
  return [...by.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
}

export const rootTotal = (m) => (m.levels.length ? m.levels[0].total[0] : 0);
export const nodeCount = (m) => m.levels.reduce((s, l) => s + l.n, 0);

/** Whether an ancestor of node (d, i) has the same name (recursion is counted once). */
function ancestorNamed(m, d, i, name) {
  for (let dd = d, ii = i; dd > 1; dd--) {
    ii = m.levels[dd].parent[ii];
    if (m.levels[dd - 1].name[ii] === name) return true;
  }
  return false;
}

/** Per function: self (summed) and total (once per stack), sorted by self. */
export function functionTable(m) {
  const self = new Map(), total = new Map();
  for (let d = 1; d < m.levels.length; d++) {
    const l = m.levels[d];
    for (let i = 0; i < l.n; i++) {
      const k = l.name[i];
      self.set(k, (self.get(k) || 0) + l.self[i]);
      if (!ancestorNamed(m, d, i, k)) total.set(k, (total.get(k) || 0) + l.total[i]);
    }
  }
  return [...total.keys()]
    .map((k) => ({ name: m.names[k], self: self.get(k) || 0, total: total.get(k) }))
    .sort((a, b) => b.self - a.self || b.total - a.total);
}

/**
 * Compiles a search: a regex (case-sensitive unless `ignoreCase`), or the literal
 * text if it is no regex.
 */
export function searchRegex(text, ignoreCase = false) {
  if (!text) return null;
  const flags = ignoreCase ? 'i' : '';
  try { return new RegExp(text, flags); } catch { return new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), flags); }
}

/**
 * Marks the nodes whose name matches `re`; `share` is the value under the outermost
 * matches over the root's (a match inside a match is not counted twice).
 */
export function search(m, re) {
  const hit = m.names.map((n) => re.test(n));
  const marks = [];
  let under = 0;
  for (let d = 0; d < m.levels.length; d++) {
    const l = m.levels[d];
    const mark = new Uint8Array(l.n); // 1: matches, 2: under a match
    for (let i = 0; i < l.n; i++) {
      const covered = d > 0 && marks[d - 1][l.parent[i]] !== 0;
      if (d > 0 && hit[l.name[i]]) {
        mark[i] = 1;
        if (!covered) under += l.total[i];
      } else if (covered) mark[i] = 2;
    }
    marks.push(mark);
  }
  const root = rootTotal(m);
  return { marks, value: under, share: root ? under / root : 0 };
}

/** The node path (names from depth 1) of node (d, i), for links. */
export function pathOf(m, d, i) {
  const out = [];
  for (let dd = d, ii = i; dd > 0; ii = m.levels[dd].parent[ii], dd--) out.unshift(m.names[m.levels[dd].name[ii]]);
  return out;
}

/** The node a path names, or null when the graph no longer has it. */
export function findPath(m, path) {
  let i = 0;
  for (let d = 1; d <= path.length; d++) {
    const up = m.levels[d - 1], l = m.levels[d];
    if (!l) return null;
    let found = -1;
    for (let c = up.first[i]; c < up.first[i] + up.count[i]; c++) {
      if (m.names[l.name[c]] === path[d - 1]) { found = c; break; }
    }
    if (found < 0) return null;
    i = found;
  }
  return { d: path.length, i };
}

function treeNode(name) {
  return { name, total: 0, children: new Map() };
}

function child(node, name) {
  let c = node.children.get(name);
  if (!c) { c = treeNode(name); node.children.set(name, c); }
  return c;
}

/** The outermost nodes named `fname` (a recursive call inside one is skipped). */
function outermost(m, fname) {
  const k = m.names.indexOf(fname);
  const out = [];
  if (k < 0) return out;
  for (let d = 1; d < m.levels.length; d++) {
    const l = m.levels[d];
    for (let i = 0; i < l.n; i++) if (l.name[i] === k && !ancestorNamed(m, d, i, k)) out.push([d, i]);
  }
  return out;
}

/** Callees of `fname`: every subtree under it, merged, as a flame model. */
export function callees(m, fname) {
  const root = treeNode(fname);
  const add = (node, d, i) => {
    const l = m.levels[d];
    node.total += l.total[i];
    const next = m.levels[d + 1];
    for (let c = l.first[i]; c < l.first[i] + l.count[i]; c++) add(child(node, m.names[next.name[c]]), d + 1, c);
  };
  for (const [d, i] of outermost(m, fname)) add(root, d, i);
  return fromTree(root);
}

/** Callers of `fname`: the stacks leading to it, reversed (it is the root), as a flame model. */
export function callers(m, fname) {
  const root = treeNode(fname);
  for (const [d, i] of outermost(m, fname)) {
    const t = m.levels[d].total[i];
    root.total += t;
    let node = root;
    for (let dd = d, ii = i; dd > 1; dd--) {
      ii = m.levels[dd].parent[ii];
      node = child(node, m.names[m.levels[dd - 1].name[ii]]);
      node.total += t;
    }
  }
  return fromTree(root);
}

/** Lays a `{name, total, children}` tree out as a model (children by name, after self). */
export function fromTree(root) {
  const names = [];
  const index = new Map();
  const nameIdx = (n) => {
    if (!index.has(n)) { index.set(n, names.length); names.push(n); }
    return index.get(n);
  };
  const levels = [];
  let row = [[root, 0]];
  while (row.length) {
    const l = newLevel(row.length, false);
    const next = [];
    row.forEach(([node, x], i) => {
      const kids = [...node.children.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      const self = node.total - kids.reduce((s, c) => s + c.total, 0);
      l.x[i] = x; l.total[i] = node.total; l.self[i] = self; l.name[i] = nameIdx(node.name);
      let cx = x + self;
      for (const c of kids) { next.push([c, cx]); cx += c.total; }
    });
    levels.push(l);
    row = next;
  }
  const m = { names, levels, diff: false, leftTicks: 0, rightTicks: 0 };
  link(m);
  return m;
}
