// A sortable, filterable table. Columns: `{key, label, num, format, bar, middle,
// wrap}`;
// clicking a header sorts by it (again: reverses); `onRow(row)` makes rows
// clickable. Text cells longer than `middle` characters (default 48) lose their
// middle, so a package path and its function both show; hovering shows it whole.
import { h, fill } from './dom.js';
import { middle } from './format.js';

export class DataTable {
  constructor(host, { columns, onRow, sort, filterKey, label, limit = 500 }) {
    Object.assign(this, { columns, onRow, filterKey, limit });
    this.sort = sort || { key: columns[columns.length - 1].key, desc: true };
    this.filter = '';
    this.rows = [];
    this.input = filterKey && h('input', {
      type: 'search', placeholder: `Filter ${label || ''}`.trim(), 'aria-label': `Filter ${label || 'rows'}`,
      oninput: () => { this.filter = this.input.value.toLowerCase(); this.render(); },
    });
    this.table = h('table', { class: 'data', 'aria-label': label || 'table' });
    this.count = h('span', { class: 'muted' });
    host.append(h('div', { class: 'flame-bar' }, this.input, this.count), h('div', { class: 'table-wrap' }, this.table));
  }

  set(rows) {
    this.rows = rows;
    this.render();
  }

  render() {
    const { key, desc } = this.sort;
    let rows = this.rows;
    if (this.filter) rows = rows.filter((r) => String(r[this.filterKey]).toLowerCase().includes(this.filter));
    rows = rows.slice().sort((a, b) => {
      const x = a[key], y = b[key];
      const c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
      return desc ? -c : c;
    });
    this.count.textContent = `${rows.length} row${rows.length === 1 ? '' : 's'}${rows.length > this.limit ? `, first ${this.limit} shown` : ''}`;
    const max = {};
    for (const c of this.columns) if (c.bar) max[c.key] = Math.max(1e-12, ...rows.map((r) => Math.abs(r[c.key])));
    const head = h('tr', {}, this.columns.map((c) => h('th', {
      class: c.num ? 'num' : '',
      'aria-sort': c.key === key ? (desc ? 'descending' : 'ascending') : 'none',
    }, h('button', {
      onclick: () => { this.sort = { key: c.key, desc: c.key === key ? !desc : !!c.num }; this.render(); },
    }, c.label, c.key === key ? (desc ? ' ▼' : ' ▲') : ''))));
    const body = rows.slice(0, this.limit).map((r) => h('tr', {
      class: this.onRow ? 'clickable' : '',
      tabindex: this.onRow ? 0 : null,
      onclick: this.onRow && (() => this.onRow(r)),
      onkeydown: this.onRow && ((e) => { if (e.key === 'Enter') this.onRow(r); }),
    }, this.columns.map((c) => h('td', {
      class: c.num ? 'num' : c.wrap ? 'text' : 'name',
      title: c.num || c.wrap ? null : String(r[c.key]),
      // The exact number behind the shown text, for tests and copy-paste.
      'data-value': c.num && typeof r[c.key] === 'number' ? String(r[c.key]) : null,
    },
      c.format ? c.format(r[c.key], r) : c.num ? String(r[c.key]) : middle(r[c.key], c.middle || 48),
      c.bar ? h('span', { class: 'bar', style: `width:${Math.round((Math.abs(r[c.key]) / max[c.key]) * 30)}px` }) : null))));
    fill(this.table, h('thead', {}, head), h('tbody', {}, body));
  }
}
