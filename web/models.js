// Models page: what this appliance serves, and which models are in memory now (state, device,
// memory, idle time, requests in flight; live while the page is open). Admins load and unload.
// On a cluster (a PostgreSQL store: the API's answer names this `node`) every live node's models,
// with a Node column: this node's live, the others' as of their last heartbeat (loaded or not, in
// flight); load and unload act on this node's own. Each model's price (USD) as /v1/models shows it.
// Admins also pull models, add them to the config and see a model's memory plan before loading it
// (models-pull.js, imported for admins only: the pull API answers 403 to anyone else).
import { api } from './api.js';
import { h, fmtInt, fmtMoney, dataTable, fillRows, replaceRow, showError, showNotice, clearMessages, busy, makeRefresher, put } from './dom.js';

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

const finite = (v) => typeof v === 'number' && Number.isFinite(v);

/**
 * A model's price (USD, /v1/models' `pricing`: only the fields its kind bills) as one line:
 * "$0.12 / $1.70 per M in/out · decisions $0.05 per M" (chat), "$0.02 per M" (embedding,
 * classifier, reranker), "$0.003 per image"; '' when none is known. Batch lines' share apart.
 */
function priceText(p) {
  if (!p || typeof p !== 'object') return '';
  const parts = [];
  if (finite(p.input_per_m) && finite(p.output_per_m)) parts.push(`${fmtMoney(p.input_per_m)} / ${fmtMoney(p.output_per_m)} per M in/out`);
  else if (finite(p.input_per_m)) parts.push(`${fmtMoney(p.input_per_m)} per M`);
  if (finite(p.decision_input_per_m)) parts.push(`decisions ${fmtMoney(p.decision_input_per_m)} per M`);
  if (finite(p.per_image)) parts.push(`${fmtMoney(p.per_image)} per image`);
  return parts.join(' · ');
}

/** "batch lines at 50%" when batches are billed at a share of the price. */
function batchText(p) {
  const share = p?.batch_share;
  return finite(share) && share >= 0 && share < 1 ? `batch lines at ${Math.round(share * 1000) / 10}%` : '';
}

export async function render({ view, signal, account }) {
  const admin = account?.role === 'admin';
  const [first, pulls] = await Promise.all([api('/models', { signal }), admin ? import('./models-pull.js') : null]);
  /** Memory plans an admin asked for, by model id: shown in the Memory column until the model loads. */
  const plans = new Map();
  const pullSection = pulls?.pullSection({ signal, onChange: () => load().catch(showError) });
  /** This node's id on a cluster, else null (one node: no Node column). */
  const self = first?.node ?? null;
  const headers = [...(self ? ['Node'] : []), 'ID', 'Name', 'Kind', 'Context size', 'Vision', 'Price', 'State', 'Device', 'Memory', 'In flight', 'Idle'];
  const { wrap, tbody } = dataTable({ id: 'models-table', label: 'Models', headers: admin ? [...headers, 'Actions'] : headers });
  put(view,
    h('p', { class: 'muted', text: 'Models load on first use (pinned ones at start) and unload when idle. This list updates every few seconds.' }),
    self ? h('p', { class: 'muted', text: "Every node of the cluster is listed: this node's models live, the other nodes' as of their last heartbeat. Load and unload act on this node's models." }) : null,
    wrap,
    pullSection?.el);

  /** A row's key: the model id, and on a cluster its node's too (one model may be served by several). */
  const keyOf = (m) => (self ? `${m.node}/${m.id}` : m.id);

  function row(m) {
    const remote = self && m.node !== self;
    if (remote) return remoteRow(m);
    const state = String(m.state ?? 'unloaded');
    const mem = m.memory_mb;
    const placement = [
      m.gpu_layers != null ? `${fmtInt(m.gpu_layers)} GPU layers` : null,
      m.context_size != null && m.slots != null ? `${fmtInt(m.context_size)} × ${fmtInt(m.slots)} context` : null,
    ].filter(Boolean).join(' · ');
    return h('tr', { 'data-row': keyOf(m), 'data-model-id': m.id, 'data-state': state, ...(self ? { 'data-node': m.node } : {}) },
      self ? nodeCell(m) : null,
      ...identityCells(m),
      h('td', { class: 'state' }, h('span', { class: `status status-${state}`, text: state }),
        m.waiting ? h('div', { class: 'muted small', text: `${fmtInt(m.waiting)} waiting` }) : null,
        h('div', { class: 'muted small', text: keepAlive(m) })),
      h('td', { class: 'device' }, m.device ?? '—', placement ? h('div', { class: 'muted small', text: placement }) : null),
      h('td', { class: 'num memory' }, mem ? `GPU ${fmtInt(mem.gpu)} MB · CPU ${fmtInt(mem.cpu)} MB` : '—',
        !mem && plans.has(m.id) ? h('div', { class: 'muted small plan-text', text: pulls.planShort(plans.get(m.id)) }) : null),
      h('td', { class: 'num in-flight', text: fmtInt(m.in_flight ?? 0) }),
      h('td', { class: 'idle', text: m.idle_s == null ? '—' : fmtSeconds(m.idle_s) }),
      admin ? h('td', null, actions(m, state)) : null);
  }

  /** What a model is, the same on every node: id, name, kind, context, vision, price. */
  function identityCells(m) {
    const price = priceText(m.pricing);
    return [
      h('td', null, h('code', { text: m.id ?? '' })),
      h('td', { text: m.name ?? '' }),
      h('td', { text: m.kind ?? '' }),
      h('td', { class: 'num', text: m.max_context ? `${fmtInt(m.max_context)} tokens` : '—' }),
      h('td', { text: m.supports_vision ? 'Yes' : 'No' }),
      h('td', { class: 'price' }, price || '—', price && batchText(m.pricing) ? h('div', { class: 'muted small', text: batchText(m.pricing) }) : null),
    ];
  }

  function nodeCell(m) {
    return h('td', { class: 'node' }, h('code', { text: m.node ?? '' }), m.node === self ? h('div', { class: 'muted small', text: 'this node' }) : null);
  }

  /** Another node's model, as of its last heartbeat: loaded or not, requests in flight. */
  function remoteRow(m) {
    const state = m.state === 'loaded' ? 'loaded' : 'unloaded';
    return h('tr', { 'data-row': keyOf(m), 'data-model-id': m.id, 'data-state': state, 'data-node': m.node },
      nodeCell(m),
      ...identityCells(m),
      h('td', { class: 'state' }, h('span', { class: `status status-${state}`, text: state }),
        h('div', { class: 'muted small', text: 'as of its last heartbeat' })),
      h('td', { class: 'device' }, '—', m.slots != null ? h('div', { class: 'muted small', text: `${fmtInt(m.slots)} ${m.slots === 1 ? 'slot' : 'slots'}` }) : null),
      h('td', { class: 'num memory', text: '—' }),
      h('td', { class: 'num in-flight', text: fmtInt(m.in_flight ?? 0) }),
      h('td', { class: 'idle', text: '—' }),
      admin ? h('td', null, h('span', { class: 'muted small', text: 'On its node' })) : null);
  }

  function actions(m, state) {
    if (state === 'unloaded') {
      return h('div', { class: 'row' },
        h('button', { type: 'button', class: 'load small', 'data-action': 'load', 'aria-label': `Load ${m.id}`, text: 'Load', onclick: (e) => act(m, 'load', e.currentTarget) }),
        pulls && !plans.has(m.id) ? h('button', { type: 'button', class: 'plan small secondary', 'data-action': 'plan', 'aria-label': `Memory plan of ${m.id}`, text: 'Plan', onclick: (e) => showPlan(m, e.currentTarget) }) : null);
    }
    if (state === 'loaded') {
      return h('button', { type: 'button', class: 'unload small danger', 'data-action': 'unload', 'aria-label': `Unload ${m.id}`, text: 'Unload', onclick: (e) => act(m, 'unload', e.currentTarget) });
    }
    return h('span', { class: 'muted small', text: 'Loading…' });
  }

  /** Where the model would load now and with how much memory (the planner's answer), shown in its row. */
  async function showPlan(m, btn) {
    clearMessages();
    await busy(btn, async () => {
      try {
        plans.set(m.id, await pulls.fetchPlan(m.id, signal));
        replaceRow(tbody, keyOf(m), row(m));
        tbody.querySelector(`tr[data-row="${CSS.escape(keyOf(m))}"] [data-action="load"]`)?.focus();
      } catch (err) { showError(err); }
    });
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
        plans.delete(m.id);
        if (action === 'load') {
          replaceRow(tbody, keyOf(m), row({ ...m, ...res }));
          showNotice(`Loaded ${m.id}${res?.device ? ` on ${res.device}` : ''}.`);
        } else {
          showNotice((UNLOADED[res?.result] ?? UNLOADED.unloaded)(m.id));
          await load();
        }
      } catch (err) { showNotice(''); showError(err); }
    });
  }

  const poller = makeRefresher(signal, POLL_MS, load);

  function show(res) {
    fillRows(tbody, (res?.data ?? []).map(row), 'No models are installed.');
    pullSection?.sync(res?.data ?? []);
    poller.schedule();
  }

  async function load() {
    show(await api('/models', { signal }));
  }

  show(first);
}
