// Small DOM helpers shared by every view.

/** Builds an element: h('td', {class: 'num', onclick: f}, 'text', child). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const errorBox = () => document.getElementById('error');

/** Shows an API or script error above the view; `null` hides it. */
export function showError(err) {
  const box = errorBox();
  if (!err) { box.hidden = true; return; }
  box.textContent = err.message || String(err);
  box.hidden = false;
}

/**
 * The warnings an answer carried (Prometheus' `warnings`: what the query names that
 * the data does not have), as a box above the view's content; nothing when none.
 */
export function warningsBox(...lists) {
  const all = [...new Set(lists.flat().filter(Boolean))];
  if (!all.length) return null;
  return h('div', { class: 'warnings', role: 'status', 'aria-label': 'Warnings' },
    all.map((w) => h('p', {}, '⚠ ', w)));
}

/** The shared tooltip: shows `content` near the pointer, or hides it on `null`. */
export function tooltip(content, clientX = 0, clientY = 0) {
  const tip = document.getElementById('tooltip');
  if (!content) { tip.hidden = true; return; }
  fill(tip, content);
  tip.hidden = false;
  const pad = 14;
  const { innerWidth: w, innerHeight: hh } = window;
  const r = tip.getBoundingClientRect();
  tip.style.left = `${Math.min(clientX + pad, w - r.width - 4)}px`;
  tip.style.top = `${clientY + pad + r.height > hh ? clientY - r.height - pad : clientY + pad}px`;
}

/** Starts a download of `blob` named `name`. */
export function download(blob, name) {
  const a = h('a', { href: URL.createObjectURL(blob), download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}
