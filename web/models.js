// Models page: what this appliance serves, and which models are in memory now (state, device,
// memory, idle time, requests in flight; live while the page is open). Admins load and unload.
import { api } from './api.js';
import { h, fmtInt, dataTable, fillRows, replaceRow, showError, showNotice, clearMessages, busy, makeRefresher, put } from './dom.js';

const POLL_MS = 5000;

/** 75 -> "1 min 15 s", 300 -> "5 min". */
function fmtSeconds(s) {
  const v = Math.round(Number(s));
  if (!Number.isFinite(v)) return '—';
  const parts = [];
  if (v >= 3600) parts.push(`${Math.floor(v / 3600)} h`);
  if (v % 3600 >= 60) parts.push(`${Math.floor((v % 3600) / 60)} min`);
  if (v % 60 || !parts.length) parts.push(`${v % 60} s`);
  return parts.join(' ');
}

function keepAlive(m) {
  if (m.pinned) return 'pinned (loaded at start)';
  if (m.keep_alive_s == null) return '';
  return m.keep_alive_s < 0 ? 'stays until room is needed' : `unloads after ${fmtSeconds(m.keep_alive_s)} idle`;
}

export async function render({ view, signal, account }) {
  const admin = account?.role === 'admin';
  const headers = ['ID', 'Name', 'Kind', 'Context size', 'Vision', 'State', 'Device', 'Memory', 'In flight', 'Idle'];
  const { wrap, tbody } = dataTable({ id: 'models-table', label: 'Models', headers: admin ? [...headers, 'Actions'] : headers });
  put(view,
    h('p', { class: 'muted', text: 'Models load on first use (pinned ones at start) and unload when idle. This list updates every few seconds.' }),
    wrap);

  function row(m) {
    const state = String(m.state ?? 'unloaded');
    const mem = m.memory_mb;
    const placement = [
      m.gpu_layers != null ? `${fmtInt(m.gpu_layers)} GPU layers` : null,
      m.context_size != null && m.slots != null ? `${fmtInt(m.context_size)} × ${fmtInt(m.slots)} context` : null,
    ].filter(Boolean).join(' · ');
    return h('tr', { 'data-row': m.id, 'data-model-id': m.id, 'data-state': state },
      h('td', null, h('code', { text: m.id ?? '' })),
      h('td', { text: m.name ?? '' }),
      h('td', { text: m.kind ?? '' }),
      h('td', { class: 'num', text: m.max_context ? `${fmtInt(m.max_context)} tokens` : '—' }),
      h('td', { text: m.supports_vision ? 'Yes' : 'No' }),
      h('td', { class: 'state' }, h('span', { class: `status status-${state}`, text: state }),
        m.waiting ? h('div', { class: 'muted small', text: `${fmtInt(m.waiting)} waiting` }) : null,
        h('div', { class: 'muted small', text: keepAlive(m) })),
      h('td', { class: 'device' }, m.device ?? '—', placement ? h('div', { class: 'muted small', text: placement }) : null),
      h('td', { class: 'num memory', text: mem ? `GPU ${fmtInt(mem.gpu)} MB · CPU ${fmtInt(mem.cpu)} MB` : '—' }),
      h('td', { class: 'num in-flight', text: fmtInt(m.in_flight ?? 0) }),
      h('td', { class: 'idle', text: m.idle_s == null ? '—' : fmtSeconds(m.idle_s) }),
      admin ? h('td', null, actions(m, state)) : null);
  }

  function actions(m, state) {
    if (state === 'unloaded') {
      return h('button', { type: 'button', class: 'load small', 'data-action': 'load', 'aria-label': `Load ${m.id}`, text: 'Load', onclick: (e) => act(m, 'load', e.currentTarget) });
    }
    if (state === 'loaded') {
      return h('button', { type: 'button', class: 'unload small danger', 'data-action': 'unload', 'aria-label': `Unload ${m.id}`, text: 'Unload', onclick: (e) => act(m, 'unload', e.currentTarget) });
    }
    return h('span', { class: 'muted small', text: 'Loading…' });
  }

  const UNLOADED = {
    unloaded: (id) => `Unloaded ${id}.`,
    when_idle: (id) => `${id} unloads when its requests in flight end.`,
    not_loaded: (id) => `${id} was not loaded.`,
  };

  async function act(m, action, btn) {
    clearMessages();
    await busy(btn, async () => {
      try {
        if (action === 'load') showNotice(`Loading ${m.id}…`);
        const res = await api(`/admin/models/${encodeURIComponent(m.id)}/${action}`, { method: 'POST' });
        if (action === 'load') {
          replaceRow(tbody, m.id, row({ ...m, ...res }));
          showNotice(`Loaded ${m.id}${res?.device ? ` on ${res.device}` : ''}.`);
        } else {
          showNotice((UNLOADED[res?.result] ?? UNLOADED.unloaded)(m.id));
          await load();
        }
      } catch (err) { showNotice(''); showError(err); }
    });
  }

  const poller = makeRefresher(signal, POLL_MS, load);

  async function load() {
    const res = await api('/models', { signal });
    fillRows(tbody, (res?.data ?? []).map(row), 'No models are installed.');
    poller.schedule();
  }

  await load();
}
