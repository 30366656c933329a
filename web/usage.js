// Usage page: 30-day cost/token charts split by model or endpoint, plus recent requests.
import { api } from './api.js';
import { h, fmtMoney, fmtInt, fmtCompact, timeEl, section, dataTable, fillRows, put, replace } from './dom.js';
import { stackedBars, PALETTE } from './chart.js';

const DAYS = 30;
const MAX_GROUPS = 7; // beyond this, the rest is lumped into "Other"

function dayRange(rows) {
  let end = new Date().toISOString().slice(0, 10);
  for (const r of rows) if (typeof r.day === 'string' && r.day > end) end = r.day;
  const endMs = Date.parse(`${end}T00:00:00Z`);
  return Array.from({ length: DAYS }, (_, i) => new Date(endMs - (DAYS - 1 - i) * 86400000).toISOString().slice(0, 10));
}

/** Group daily rows by model/endpoint: series of cost and token values aligned with `days`. */
function aggregate(rows, by) {
  const days = dayRange(rows);
  const index = new Map(days.map((d, i) => [d, i]));
  const inRange = rows.filter((r) => index.has(r.day));
  const costOf = new Map(), tokOf = new Map();
  for (const r of inRange) {
    const g = String(r[by] ?? 'unknown');
    costOf.set(g, (costOf.get(g) || 0) + (Number(r.cost_usd) || 0));
    tokOf.set(g, (tokOf.get(g) || 0) + (Number(r.input_tokens) || 0) + (Number(r.output_tokens) || 0));
  }
  const ranked = [...costOf.keys()].sort((a, b) => costOf.get(b) - costOf.get(a) || tokOf.get(b) - tokOf.get(a));
  const keep = new Set(ranked.length > MAX_GROUPS + 1 ? ranked.slice(0, MAX_GROUPS) : ranked);
  const names = [...keep];
  if (keep.size < ranked.length) names.push('Other');
  const mk = () => names.map((name, i) => ({ name, color: PALETTE[i % PALETTE.length], values: new Array(DAYS).fill(0) }));
  const cost = mk(), tokens = mk();
  for (const r of inRange) {
    const g = String(r[by] ?? 'unknown');
    const gi = names.indexOf(keep.has(g) ? g : 'Other');
    const di = index.get(r.day);
    cost[gi].values[di] += Number(r.cost_usd) || 0;
    tokens[gi].values[di] += (Number(r.input_tokens) || 0) + (Number(r.output_tokens) || 0);
  }
  return { days, cost, tokens, rows: inRange };
}

/**
 * A legend's colour swatch. The colour is set through the CSSOM, which the console's CSP
 * (style-src 'self', no 'unsafe-inline') allows; a style="" attribute is blocked by it.
 */
function swatch(color) {
  const el = h('span', { class: 'swatch', 'aria-hidden': 'true' });
  el.style.backgroundColor = color;
  return el;
}

export async function render({ view, signal }) {
  const split = h('select', { id: 'usage-split' },
    h('option', { value: 'model', text: 'Model' }), h('option', { value: 'endpoint', text: 'Endpoint' }));
  const summary = h('p', { id: 'usage-summary', class: 'muted', text: 'Loading…' });
  const chart = h('figure', { id: 'usage-chart', class: 'chart-box', 'aria-busy': 'true' });
  const recent = dataTable({ id: 'recent-table', label: 'Recent requests', headers: ['Time', 'Model', 'Endpoint', 'Key', 'Input tokens', 'Output tokens', 'Cost'] });

  put(view,
    h('div', { class: 'toolbar' }, h('label', { for: 'usage-split', text: 'Split by' }), split),
    summary,
    chart,
    section('Recent requests', recent.wrap));

  let data = { days: [], recent: [] };

  function drawChart() {
    const by = split.value;
    const agg = aggregate(Array.isArray(data.days) ? data.days : [], by);
    const label = by === 'model' ? 'model' : 'endpoint';
    const totalCost = agg.rows.reduce((a, r) => a + (Number(r.cost_usd) || 0), 0);
    const totalTok = agg.rows.reduce((a, r) => a + (Number(r.input_tokens) || 0) + (Number(r.output_tokens) || 0), 0);
    const totalReq = agg.rows.reduce((a, r) => a + (Number(r.requests) || 0), 0);
    summary.textContent = `Last ${DAYS} days: ${fmtMoney(totalCost)}, ${fmtInt(totalTok)} tokens, ${fmtInt(totalReq)} requests.`;

    const legend = h('ul', { class: 'legend', 'aria-label': `Legend (${label})` },
      agg.cost.map((se) => h('li', null, swatch(se.color), se.name)));
    // In a clipped box: a table lays out as wide as its cells whatever its own width (it made a
    // 390 px page scroll sideways).
    const srTable = h('div', { class: 'sr-only' }, h('table', null,
      h('caption', { text: `Usage per day by ${label}` }),
      h('thead', null, h('tr', null, ['Day', label === 'model' ? 'Model' : 'Endpoint', 'Requests', 'Input tokens', 'Output tokens', 'Cost'].map((t) => h('th', { scope: 'col', text: t })))),
      h('tbody', null, [...agg.rows].sort((a, b) => (a.day < b.day ? -1 : a.day > b.day ? 1 : 0)).map((r) => h('tr', null,
        h('td', { text: r.day }), h('td', { text: `${r[by] ?? ''}` }), h('td', { text: fmtInt(r.requests) }),
        h('td', { text: fmtInt(r.input_tokens) }), h('td', { text: fmtInt(r.output_tokens) }), h('td', { text: fmtMoney(r.cost_usd) }))))));

    replace(chart,
      h('figcaption', { text: `Cost and tokens per day over the last ${DAYS} days, split by ${label}.` }),
      h('h2', { text: 'Cost per day' }),
      stackedBars({ title: `Cost per day by ${label}`, days: agg.days, series: agg.cost, format: fmtMoney }),
      h('h2', { text: 'Tokens per day' }),
      stackedBars({ title: `Tokens per day (input + output) by ${label}`, days: agg.days, series: agg.tokens, format: fmtCompact }),
      agg.cost.length ? legend : null,
      srTable);
    chart.removeAttribute('aria-busy');
  }

  split.addEventListener('change', drawChart);

  try {
    data = (await api(`/usage?days=${DAYS}`, { signal })) || data;
  } catch (err) {
    summary.textContent = 'Usage could not be loaded.';
    chart.removeAttribute('aria-busy');
    throw err;
  }
  drawChart();
  const rows = (Array.isArray(data.recent) ? data.recent : []).map((r) => h('tr', null,
    h('td', null, timeEl(r.created_at)),
    h('td', { text: r.model ?? '' }),
    h('td', { text: r.endpoint ?? '' }),
    h('td', null, h('code', { text: r.key ?? '' })),
    h('td', { class: 'num', text: fmtInt(r.input_tokens) }),
    h('td', { class: 'num', text: fmtInt(r.output_tokens) }),
    h('td', { class: 'num', text: fmtMoney(r.cost_usd) })));
  fillRows(recent.tbody, rows, 'No requests yet.');
}
