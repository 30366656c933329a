// Models page: what this appliance serves.
import { api } from './api.js';
import { h, fmtInt, dataTable, fillRows } from './dom.js';

export async function render({ view, signal }) {
  const { wrap, tbody } = dataTable({ id: 'models-table', label: 'Models', headers: ['ID', 'Name', 'Kind', 'Context size', 'Vision'] });
  view.append(wrap);
  const res = await api('/models', { signal });
  fillRows(tbody, (res?.data ?? []).map((m) => h('tr', { 'data-row': m.id, 'data-model-id': m.id },
    h('td', null, h('code', { text: m.id ?? '' })),
    h('td', { text: m.name ?? '' }),
    h('td', { text: m.kind ?? '' }),
    h('td', { class: 'num', text: m.max_context ? `${fmtInt(m.max_context)} tokens` : '—' }),
    h('td', { text: m.supports_vision ? 'Yes' : 'No' }))), 'No models are installed.');
}
