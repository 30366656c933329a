// Batches page: list with progress, result/error file links, cancel. Refreshes while batches run.
import { api } from './api.js';
import { h, timeEl, dataTable, fillRows, replaceRow, showError, showNotice, clearMessages, busy, makePoller, put } from './dom.js';

const ENDED = new Set(['completed', 'failed', 'expired', 'cancelled']);
const POLL_MS = 5000;
const fileHref = (id) => `/console/api/files/${encodeURIComponent(id)}/content`;

export async function render({ view, signal }) {
  const { wrap, tbody } = dataTable({
    id: 'batches-table', label: 'Batches',
    headers: ['ID', 'Endpoint', 'Status', 'Progress', 'Created', 'Files', 'Actions'],
  });
  put(view, h('p', { class: 'muted', text: 'Batches are created through the API (/v1/batches). Result files download as JSONL.' }), wrap);

  function row(b) {
    const c = b.request_counts || {};
    const total = Number(c.total) || 0;
    const done = (Number(c.completed) || 0) + (Number(c.failed) || 0);
    const text = `${done} of ${total}${c.failed ? ` (${c.failed} failed)` : ''}`;
    const status = String(b.status ?? '');
    const canCancel = !ENDED.has(status) && status !== 'cancelling';
    return h('tr', { 'data-row': b.id, 'data-batch-id': b.id },
      h('td', null, h('code', { text: b.id })),
      h('td', { text: b.endpoint ?? '' }),
      h('td', null, h('span', { class: `status status-${status}`, text: status })),
      h('td', null, h('progress', { max: total || 1, value: Math.min(done, total || 1), 'aria-label': `Progress: ${text}` }), ' ', h('span', { class: 'muted', text })),
      h('td', null, timeEl(b.created_at)),
      h('td', { class: 'links' },
        b.output_file_id ? h('a', { href: fileHref(b.output_file_id), 'data-action': 'output', text: 'Output' }) : null,
        b.error_file_id ? h('a', { href: fileHref(b.error_file_id), 'data-action': 'errors', text: 'Errors' }) : null,
        !b.output_file_id && !b.error_file_id ? '—' : null),
      h('td', null, canCancel
        ? h('button', { type: 'button', class: 'cancel small danger', 'data-action': 'cancel', text: 'Cancel', onclick: (e) => cancel(b, e.currentTarget) })
        : null));
  }

  async function cancel(b, btn) {
    clearMessages();
    await busy(btn, async () => {
      try {
        const updated = await api(`/batches/${encodeURIComponent(b.id)}/cancel`, { method: 'POST' });
        replaceRow(tbody, b.id, row({ ...b, ...(updated || {}) }));
        showNotice(`Cancellation requested for batch ${b.id}.`);
      } catch (err) { showError(err); }
    });
  }

  const poller = makePoller(signal, POLL_MS, () => load().catch((err) => { if (!signal.aborted) showError(err); poller.schedule(); }));

  async function load() {
    const res = await api('/batches', { signal });
    const list = res?.data ?? [];
    fillRows(tbody, list.map(row), 'No batches yet.');
    if (list.some((b) => !ENDED.has(b.status))) poller.schedule();
  }

  await load();
}
