// Entry point: routes `/ui/<view>` to its module, re-renders on URL changes, and
// exposes `window.profiledbUI` so tests and benches can ask what is drawn.
import { showError, tooltip } from './dom.js';
import * as api from './api.js';
import * as state from './state.js';

const root = document.getElementById('view');
const tenant = document.getElementById('tenant');
let generation = 0;
let rendering = false;

/** What a view gets: where it stands, and where it registers what it draws. */
function context(gen) {
  return {
    current: () => gen === generation,
    flames: {},
    mark: (name) => { if (!(name in timings)) timings[name] = performance.now(); },
  };
}

const timings = {};
let ui = context(0);

async function render() {
  const gen = ++generation;
  const view = state.currentView();
  ui = context(gen);
  rendering = true;
  tooltip(null);
  showError(null);
  tenant.value = state.get('tenant');
  document.querySelectorAll('header nav a').forEach((a) => {
    if (a.dataset.view === view) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
    a.href = state.link(a.dataset.view, {});
  });
  document.title = `profiledb · ${view}`;
  const host = document.createElement('div');
  root.replaceChildren(host);
  try {
    const mod = await import(`./${view}.js`);
    await mod.render(host, ui);
  } catch (e) {
    if (gen === generation) showError(e);
  } finally {
    if (gen === generation) rendering = false;
  }
}

tenant.addEventListener('change', () => state.update({ tenant: tenant.value.trim() }, { push: true }));
// In-app links (the navigation, and links marked `data-route`) switch views without
// reloading the modules; a modified click still opens a new tab.
document.addEventListener('click', (e) => {
  const a = e.target.closest('header nav a, a[data-route]');
  if (!a || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
  e.preventDefault();
  state.navigate(a.href);
});
window.addEventListener('popstate', render);
window.addEventListener('statechange', render);

window.profiledbUI = {
  /** The main flame graph of the view (Explore's, or Compare's diff). */
  get flame() { return ui.flames.explore || ui.flames.diff || null; },
  /** Every flame graph of the view by role: explore, callers, callees, base, compare, diff. */
  get flames() { return ui.flames; },
  /** True once the view has rendered and no request is running. */
  idle: () => !rendering && api.idle(),
  /** The server's share of the whole merge for Explore's search: `{value, share}`. */
  get search() { return ui.search || null; },
  /** Explore's time chart (its `rates()` are what it draws). */
  get chart() { return ui.chart || null; },
  /** The Labels view's cells: `[{value, total, share}]`. */
  get breakdown() { return ui.breakdown || null; },
  /** ms since navigation start at which marks (e.g. `flameDrawn`) were first reached. */
  timings,
  view: () => state.currentView(),
};

render();
