// Rentals page: available GPUs and the account's rentals (live status while any is active).
import { api } from './api.js';
import { h, fmtMoney, fmtInt, timeEl, section, dataTable, fillRows, replaceRow, showError, showNotice, clearMessages, busy, makeRefresher, put } from './dom.js';

const ACTIVE = new Set(['pending', 'running', 'stopping']);
const STOPPABLE = new Set(['pending', 'running']);
const POLL_MS = 3000;

/** JupyterLab URL with the access token, only for http(s) URLs. */
function jupyterHref(conn) {
  if (!conn || typeof conn.url !== 'string') return null;
  let u;
  try { u = new URL(conn.url, location.href); } catch { return null; }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
  if (conn.token && !u.searchParams.has('token')) u.searchParams.set('token', conn.token);
  return u.href;
}

export async function render({ view, signal }) {
  const gpus = dataTable({ id: 'gpus-table', label: 'Available GPUs', headers: ['Node', 'GPU', 'VRAM', 'Compute capability', 'Location', 'Price per hour'] });
  const rentals = dataTable({
    id: 'rentals-table', label: 'Your rentals',
    headers: ['Rental', 'Status', 'Key', 'Billing', 'Cost so far', 'Started', 'Ends', 'JupyterLab', 'Actions'],
  });
  const live = h('p', { id: 'rentals-live', class: 'muted', role: 'status' });
  put(view,
    h('p', { class: 'muted', text: 'Rentals are started with an API key that has the GPU Rentals scope (/api/v1). They are billed per minute.' }),
    section('Available GPUs', gpus.wrap),
    section('Your rentals', live, rentals.wrap));

  function gpuRow(g) {
    const vram = Number(g.vram_mb);
    return h('tr', { 'data-row': g.node_id },
      h('td', null, h('code', { text: g.node_id ?? '' })),
      h('td', { text: g.gpu_model ?? '' }),
      h('td', { class: 'num', text: Number.isFinite(vram) ? `${fmtInt(Math.round(vram / 1024))} GB` : '—' }),
      h('td', { text: g.compute_cap ?? '—' }),
      h('td', { text: [g.country, g.country_code && `(${g.country_code})`].filter(Boolean).join(' ') || '—' }),
      h('td', { class: 'num', text: fmtMoney(g.price_per_hour) }));
  }

  function rentalRow(r) {
    const status = String(r.status ?? '');
    const href = jupyterHref(r.connection);
    const ends = r.stopped_at ? ['Stopped ', timeEl(r.stopped_at)] : r.expires_at ? ['Expires ', timeEl(r.expires_at)] : '—';
    return h('tr', { 'data-row': r.rental_id, 'data-rental-id': r.rental_id },
      h('td', null, h('code', { text: r.rental_id ?? '' }), h('div', { class: 'muted small' }, 'on ', h('code', { text: r.node_id ?? '' }))),
      h('td', null, h('span', { class: `status status-${status}`, text: status }),
        r.stop_reason ? h('div', { class: 'muted small', text: r.stop_reason }) : null),
      h('td', null, h('code', { text: r.key ?? '' })),
      h('td', { class: 'num' }, `${fmtMoney(r.price_per_hour)}/h`, h('div', { class: 'muted small', text: `${fmtInt(r.billed_minutes ?? 0)} min billed` })),
      h('td', { class: 'num cost', text: fmtMoney(r.cost ?? 0) }),
      h('td', null, r.running_at ? timeEl(r.running_at) : ['Requested ', timeEl(r.created_at)]),
      h('td', null, ends),
      h('td', null, href ? h('a', { href, target: '_blank', rel: 'noopener', 'data-action': 'open', text: 'Open JupyterLab' }) : '—'),
      h('td', null, STOPPABLE.has(status)
        ? h('button', { type: 'button', class: 'stop small danger', 'data-action': 'stop', text: 'Stop', onclick: (e) => stop(r, e.currentTarget) })
        : null));
  }

  async function stop(r, btn) {
    clearMessages();
    await busy(btn, async () => {
      try {
        const updated = await api(`/rentals/${encodeURIComponent(r.rental_id)}/stop`, { method: 'POST' });
        replaceRow(rentals.tbody, r.rental_id, rentalRow({ ...r, ...(updated || {}) }));
        showNotice(`Stopping rental ${r.rental_id}.`);
        poller.schedule();
      } catch (err) { showError(err); }
    });
  }

  const poller = makeRefresher(signal, POLL_MS, loadRentals);

  async function loadRentals() {
    const res = await api('/rentals', { signal });
    const list = res?.data ?? [];
    fillRows(rentals.tbody, list.map(rentalRow), 'No rentals yet.');
    const active = list.some((r) => ACTIVE.has(r.status));
    live.textContent = active ? 'Status updates live every 3 seconds while a rental is active.' : '';
    if (active) poller.schedule();
  }

  async function loadGpus() {
    const res = await api('/gpus', { signal });
    fillRows(gpus.tbody, (res?.data ?? []).map(gpuRow), 'No GPUs are available right now.');
  }

  const results = await Promise.allSettled([loadGpus(), loadRentals()]);
  for (const r of results) if (r.status === 'rejected' && !signal.aborted) showError(r.reason);
}
