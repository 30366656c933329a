// Models page, for admins (issue 48): pull a model into the models dir — a catalogue entry, or a
// Hugging Face reference hf:OWNER/REPO[:QUANT] — with live progress (bytes, rate, time left), cancel
// it (what was downloaded is kept, and pulling it again resumes it), add it to the config (the
// server serves it at once) and load it, its memory plan (device, MB) shown first. The server's
// side: src/1-api/console/admin-models.ts. Loaded only for admins (models.js imports it then).
import { api } from './api.js';
import { h, put, replace, uid, fmtInt, showError, showNotice, clearMessages, busy, makeRefresher } from './dom.js';

const FAST_MS = 1000; // while a pull is queued or running
const SLOW_MS = 10000; // otherwise: pulls started elsewhere (another tab, another admin) show up
const ACTIVE = new Set(['queued', 'running']);
const KINDS = { chat: 'Chat', embedding: 'Embeddings', classifier: 'Classifiers', reranker: 'Rerankers', image: 'Images' };

const finite = (v) => typeof v === 'number' && Number.isFinite(v);

/** 1234567 -> "1.2 MB": decimal units, as `appliance models pull` prints them. */
export function fmtBytes(n) {
  if (!finite(n) || n < 0) return '?';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let v = n;
  let u = 0;
  while (v >= 1000 && u < units.length - 1) { v /= 1000; u++; }
  return u === 0 ? `${Math.round(n)} B` : `${v.toFixed(1)} ${units[u]}`;
}

/** 6 -> "6 s", 125 -> "2 min 5 s", 3720 -> "1 h 2 min". */
export function fmtDuration(s) {
  const v = Math.max(0, Math.round(Number(s)));
  if (!Number.isFinite(v)) return '';
  if (v >= 3600) return `${Math.floor(v / 3600)} h ${Math.floor((v % 3600) / 60)} min`;
  if (v >= 60) return `${Math.floor(v / 60)} min ${v % 60} s`;
  return `${v} s`;
}

/** The pull's line: "12.3 MB of 40.0 MB · 5.1 MB/s · 6 s left" while it runs; what it came to after. */
export function progressText(p) {
  const of = finite(p.bytes_total) ? `${fmtBytes(p.bytes_done)} of ${fmtBytes(p.bytes_total)}` : fmtBytes(p.bytes_done);
  switch (p.state) {
    case 'queued': return `Waiting for another pull to finish · ${of}`;
    case 'running': {
      const parts = [of];
      if (p.rate > 0) parts.push(`${fmtBytes(p.rate)}/s`);
      if (finite(p.eta_s)) parts.push(`${fmtDuration(p.eta_s)} left`);
      else if (!(p.rate > 0)) parts.push('starting…');
      return parts.join(' · ');
    }
    case 'done': return `${fmtBytes(p.bytes_done)} · every file's size and SHA-256 verified`;
    case 'cancelled': return `Cancelled at ${of}; what was downloaded is kept: pull it again to resume`;
    case 'failed': return `Failed at ${of}`;
    default: return of;
  }
}

const mb = (n) => `${fmtInt(Math.round(Number(n) || 0))} MB`;

/** A model's memory plan (GET /admin/models/:id/plan) as one sentence. */
export function planText(plan) {
  if (!plan) return '';
  if (plan.fits === 'unread' || plan.fits === 'refused') return `Memory plan: cannot load here: ${plan.reason ?? 'no room'}`;
  const mem = plan.memory_mb ? `${mb(plan.memory_mb.cpu)} RAM${plan.memory_mb.gpu ? ` + ${mb(plan.memory_mb.gpu)} GPU` : ''}` : '';
  const layers = finite(plan.gpu_layers) && plan.gpu_layers > 0 ? ` (${fmtInt(plan.gpu_layers)}${finite(plan.layers) ? ` of ${fmtInt(plan.layers)}` : ''} layers on the GPU)` : '';
  const context = plan.kind === 'chat' && finite(plan.context_size) && finite(plan.slots) ? `, ${fmtInt(plan.context_size)} tokens × ${fmtInt(plan.slots)} ${plan.slots === 1 ? 'slot' : 'slots'}` : '';
  if (plan.fits === 'loaded') return `Loaded on ${plan.device ?? '?'}${mem ? `: ${mem}` : ''}${context}`;
  const where = `on ${plan.device}${layers}: ${mem}${context}`;
  if (plan.fits === 'alone') return `Memory plan: ${where}, once idle models unload (${(plan.unloads ?? []).join(', ')})`;
  return `Memory plan: ${where}`;
}

/** The plan in a few words, for the models table's Memory column: "planned: 27 MB RAM on cpu". */
export function planShort(plan) {
  if (!plan) return '';
  if (plan.fits === 'unread' || plan.fits === 'refused') return `cannot load here: ${plan.reason ?? 'no room'}`;
  const mem = plan.memory_mb ? `${plan.memory_mb.gpu ? `${mb(plan.memory_mb.gpu)} GPU + ` : ''}${mb(plan.memory_mb.cpu)} RAM` : '';
  return `planned: ${mem} on ${plan.device ?? '?'}${plan.fits === 'alone' ? ` once ${(plan.unloads ?? []).join(', ')} unload` : ''}`;
}

/** A served model's plan, from the server. */
export const fetchPlan = (id, signal) => api(`/admin/models/${encodeURIComponent(id)}/plan`, { signal });

/**
 * The admin's pull section: `{ el, sync }`. `onChange()` is called when the served models change (a
 * model added or loaded here), so the page's table refreshes; `sync(models)` is given the table's
 * rows each time they are read, so a pulled model's plan follows a load or unload made elsewhere.
 */
export function pullSection({ signal, onChange = () => {} }) {
  const headingId = uid('pull-h');
  const selectId = uid('pull-cat');
  const refId = uid('pull-ref');
  const hintId = uid('pull-hint');
  const select = h('select', { id: selectId, name: 'catalogue' }, h('option', { value: '', text: 'Loading the catalogue…' }));
  const ref = h('input', { id: refId, name: 'reference', placeholder: 'hf:OWNER/REPO:QUANT', autocomplete: 'off', autocapitalize: 'none', spellcheck: 'false', 'aria-describedby': hintId });
  const submit = h('button', { type: 'submit', class: 'pull-submit', text: 'Pull' });
  const form = h('form', { class: 'pull-form', novalidate: true },
    h('div', { class: 'field' }, h('label', { for: selectId, text: 'From the catalogue' }), select),
    h('div', { class: 'field' },
      h('label', { for: refId, text: 'Or a Hugging Face reference' }), ref,
      h('span', { id: hintId, class: 'muted small', text: 'A GGUF chat model, e.g. hf:ggml-org/Qwen3-1.7B-GGUF:Q4_K_M. When filled in, it is pulled instead of the catalogue choice.' })),
    h('div', { class: 'pull-actions' }, submit));
  form.addEventListener('submit', (ev) => { ev.preventDefault(); start(); });
  const where = h('p', { class: 'muted', text: 'Each file is checked against its recorded size and SHA-256 before the server may use it. A cancelled or interrupted pull keeps what it downloaded: pulling the same model again resumes it.' });
  const list = h('ul', { class: 'pulls', 'aria-label': 'Pulls' });
  const empty = h('p', { class: 'muted pulls-empty', text: 'No pulls yet.' });
  const el = h('section', { class: 'pull-section', 'aria-labelledby': headingId, 'data-testid': 'pull-section' },
    h('h2', { id: headingId, text: 'Pull a model' }), where, form,
    h('h3', { text: 'Pulls' }), empty, list);

  /** id → { p, li, parts, plan } */
  const items = new Map();
  let entries = [];

  function fillCatalogue(data) {
    entries = data;
    const keep = select.value;
    const groups = new Map();
    for (const e of data.filter((x) => x.pullable)) {
      const label = KINDS[e.kind] ?? e.kind;
      if (!groups.has(label)) groups.set(label, h('optgroup', { label }));
      const state = e.configured ? 'served' : e.pulling ? 'pulling' : e.status === 'present' ? 'downloaded' : e.status === 'partial' ? 'partly downloaded' : '';
      put(groups.get(label), h('option', { value: e.id, text: `${e.name} · ${e.bytes == null ? 'size at pull' : fmtBytes(e.bytes)}${state ? ` · ${state}` : ''}` }));
    }
    replace(select, h('option', { value: '', text: 'Choose a model…' }), ...groups.values());
    if ([...select.options].some((o) => o.value === keep)) select.value = keep;
  }

  function button(cls, text, label, onclick) {
    return h('button', { type: 'button', class: `small ${cls}`, 'data-action': cls, text, 'aria-label': label, onclick: (ev) => onclick(ev.currentTarget) });
  }

  function item(p) {
    const name = p.model ?? p.source;
    const textId = uid('pull-text');
    const parts = {
      status: h('span', { class: 'status' }),
      bar: h('progress', { class: 'pull-bar', max: 1, 'aria-label': `Download of ${name}`, 'aria-describedby': textId }),
      text: h('p', { id: textId, class: 'pull-text' }),
      file: h('p', { class: 'muted small pull-file' }),
      error: h('p', { class: 'pull-error' }),
      plan: h('p', { class: 'pull-plan' }),
      cancel: button('cancel danger', 'Cancel', `Cancel the pull of ${name}`, (b) => cancel(p.id, b)),
      add: button('add', 'Add to config', `Add ${name} to the config`, (b) => add(p.id, b)),
      load: button('load', 'Load', `Load ${name}`, (b) => load(p.id, b)),
      again: button('again secondary', 'Pull again', `Pull ${name} again`, (b) => again(p.id, b)),
    };
    const li = h('li', { class: 'pull', 'data-pull-id': p.id },
      h('div', { class: 'pull-head' },
        h('strong', { class: 'pull-model' }, h('code', { text: name })), parts.status,
        h('span', { class: 'muted small pull-source', text: p.source === name ? '' : `from ${p.source}` })),
      parts.bar, parts.text, parts.file, parts.error, parts.plan,
      h('div', { class: 'buttons' }, parts.cancel, parts.add, parts.load, parts.again));
    return { p, li, parts, plan: null, planning: null };
  }

  /** Shows `p` in its item (made once; updated in place, so focus and screen readers keep their place). */
  function update(p) {
    let it = items.get(p.id);
    if (!it) {
      it = item(p);
      items.set(p.id, it);
      // newest on top; a control that had focus in the list keeps it
      const focused = list.contains(document.activeElement) ? document.activeElement : null;
      replace(list, it.li, ...list.children);
      focused?.focus();
    }
    const before = it.p;
    it.p = p;
    const { parts } = it;
    it.li.dataset.state = p.state;
    parts.status.className = `status status-${p.state}`;
    parts.status.textContent = p.added && p.state === 'done' ? 'added' : p.state;
    const total = finite(p.bytes_total) && p.bytes_total > 0 ? p.bytes_total : null;
    if (total !== null && (p.state !== 'queued' || p.bytes_done > 0)) {
      parts.bar.max = total;
      parts.bar.value = Math.min(total, p.bytes_done);
    } else {
      parts.bar.removeAttribute('value'); // indeterminate: the size is not known yet
    }
    parts.text.textContent = progressText(p);
    const files = p.files ?? [];
    const n = files.findIndex((f) => f.path === p.file);
    parts.file.textContent = p.state === 'running' && p.file ? `File ${n + 1} of ${files.length}: ${p.file}${p.message ? ` · ${p.message}` : ''}` : '';
    parts.file.hidden = !parts.file.textContent;
    parts.error.textContent = p.error ?? '';
    parts.error.hidden = !p.error;
    parts.plan.textContent = p.configured ? planText(it.plan) : '';
    parts.plan.hidden = !parts.plan.textContent;
    const busyElsewhere = [...items.values()].some((o) => o !== it && o.p.model === p.model && ACTIVE.has(o.p.state));
    parts.cancel.hidden = !ACTIVE.has(p.state);
    parts.add.hidden = !(p.state === 'done' && !p.configured);
    parts.load.hidden = !(p.state === 'done' && p.configured && it.plan && it.plan.fits !== 'loaded');
    parts.again.hidden = !((p.state === 'failed' || p.state === 'cancelled') && !busyElsewhere);
    parts.again.textContent = p.state === 'cancelled' ? 'Resume' : 'Try again';
    // A served model's plan is asked for once (and again after a load).
    if (p.state === 'done' && p.configured && !it.plan && !it.planning) void refreshPlan(it);
    if (before && ACTIVE.has(before.state) && !ACTIVE.has(p.state)) ended(p);
  }

  /** Asks for the item's model's plan (one request at a time per item) and shows it. */
  function refreshPlan(it) {
    it.planning ??= (async () => {
      try {
        it.plan = await fetchPlan(it.p.model, signal);
      } catch (err) {
        if (signal.aborted) return;
        it.plan = { fits: 'unread', reason: err.message };
      } finally {
        it.planning = null;
      }
      update(it.p);
    })();
    return it.planning;
  }

  function ended(p) {
    if (p.state === 'done') showNotice(`Pulled ${p.model}: every file verified.${p.configured ? '' : ' Add it to the config to serve it.'}`);
    else if (p.state === 'failed') showError(`The pull of ${p.model} failed: ${p.error ?? 'unknown error'}`);
    void loadCatalogue();
  }

  function show(pulls) {
    const listed = new Set(pulls.map((p) => p.id));
    for (const [id, it] of items) if (!listed.has(id)) { it.li.remove(); items.delete(id); }
    // oldest first, so each new one is prepended above the others: newest on top
    for (const p of [...pulls].reverse()) update(p);
    empty.hidden = items.size > 0;
  }

  const fast = makeRefresher(signal, FAST_MS, refresh);
  const slow = makeRefresher(signal, SLOW_MS, refresh);
  function schedule() {
    const running = [...items.values()].some((it) => ACTIVE.has(it.p.state));
    (running ? slow : fast).stop();
    (running ? fast : slow).schedule();
  }
  async function refresh() {
    const res = await api('/admin/pulls', { signal });
    show(res?.data ?? []);
    schedule();
  }
  async function loadCatalogue() {
    try {
      fillCatalogue((await api('/admin/catalogue', { signal }))?.data ?? []);
    } catch (err) {
      if (!signal.aborted) showError(err);
    }
  }

  async function start(source = ref.value.trim() || select.value) {
    clearMessages();
    if (!source) {
      showError('Choose a model from the catalogue, or enter a Hugging Face reference such as hf:OWNER/REPO:QUANT.');
      select.focus();
      return;
    }
    await busy(submit, async () => {
      try {
        showNotice(`Asking for ${source}…`);
        const p = await api('/admin/pulls', { body: { source } });
        ref.value = '';
        update(p);
        empty.hidden = true;
        showNotice(`Pulling ${p.model}.`);
        schedule();
        void loadCatalogue();
      } catch (err) {
        showNotice('');
        showError(err);
        (ref.value.trim() ? ref : select).focus();
      }
    });
  }

  async function cancel(id, btn) {
    clearMessages();
    await busy(btn, async () => {
      try {
        const p = await api(`/admin/pulls/${encodeURIComponent(id)}/cancel`, { method: 'POST' });
        update(p);
        showNotice(`Cancelled the pull of ${p.model}; what was downloaded is kept.`);
        items.get(id)?.parts.again.focus();
        schedule();
      } catch (err) { showError(err); }
    });
  }

  async function add(id, btn) {
    clearMessages();
    await busy(btn, async () => {
      try {
        const res = await api(`/admin/pulls/${encodeURIComponent(id)}/add`, { method: 'POST' });
        const it = items.get(id);
        if (it) it.plan = null;
        update(res.pull);
        showNotice(`Added ${res.pull.model} to ${res.file}; the server serves it now.`);
        onChange();
        void loadCatalogue();
        if (it) { await refreshPlan(it); it.parts.load.focus(); }
      } catch (err) { showError(err); }
    });
  }

  async function load(id, btn) {
    const it = items.get(id);
    if (!it) return;
    clearMessages();
    await busy(btn, async () => {
      try {
        showNotice(`Loading ${it.p.model}…`);
        const s = await api(`/admin/models/${encodeURIComponent(it.p.model)}/load`, { method: 'POST' });
        it.plan = { ...s, fits: 'loaded' };
        update(it.p);
        showNotice(`Loaded ${it.p.model}${s?.device ? ` on ${s.device}` : ''}.`);
        onChange();
        it.parts.plan.setAttribute('tabindex', '-1');
        it.parts.plan.focus();
      } catch (err) { showNotice(''); showError(err); }
    });
  }

  async function again(id, btn) {
    const it = items.get(id);
    if (!it) return;
    await busy(btn, () => start(it.p.source));
  }

  /** The served models as the table read them: a plan that no longer says whether the model is loaded is asked for again. */
  function sync(models) {
    for (const it of items.values()) {
      const m = models.find((x) => x.id === it.p.model && (x.as_of ?? 'live') === 'live');
      if (!m || !it.plan || it.planning || m.state === 'loading') continue;
      if ((m.state === 'loaded') !== (it.plan.fits === 'loaded')) void refreshPlan(it);
    }
  }

  void loadCatalogue();
  refresh().catch((err) => { if (!signal.aborted) { showError(err); slow.schedule(); } });
  return { el, sync };
}
