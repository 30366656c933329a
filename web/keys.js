// Keys page: balance, trial, create/rotate/revoke keys, rental scope and limits.
import { api, unwrap } from './api.js';
import { h, uid, fmtMoney, fmtInt, timeEl, section, dataTable, fillRows, replaceRow, showError, showNotice, clearMessages, busy, put } from './dom.js';

export async function render({ view, signal }) {
  // --- balance + trial ---
  const balance = h('dd', { id: 'balance', text: '…' });
  const trial = h('dd', { id: 'trial', text: '…' });
  const trialUsed = h('dd', { id: 'trial-used', class: 'muted' });
  const stats = h('dl', { class: 'stats' },
    h('div', null, h('dt', { text: 'Balance' }), balance),
    h('div', null, h('dt', { text: 'Free trial remaining' }), trial, trialUsed));

  // --- new key panel (shown once after create/rotate) ---
  const noteId = uid('note');
  const keyOut = h('input', { id: 'new-key', type: 'text', readonly: true, class: 'mono', spellcheck: 'false', autocomplete: 'off', 'aria-describedby': noteId });
  const copyStatus = h('span', { role: 'status', class: 'muted', 'data-testid': 'copy-status' });
  const panelTitle = h('h2', { id: uid('nk'), text: 'Your new API key' });
  const panel = h('section', { id: 'new-key-panel', class: 'panel highlight', 'aria-labelledby': panelTitle.id, hidden: true },
    panelTitle,
    h('p', { id: noteId, text: 'Copy this key now and store it somewhere safe. It will not be shown again.' }),
    h('div', { class: 'row' },
      h('label', { for: 'new-key', class: 'sr-only', text: 'New API key' }), keyOut,
      h('button', { type: 'button', id: 'copy-key', onclick: copyKey, text: 'Copy' }),
      h('button', { type: 'button', class: 'secondary', onclick: hidePanel, text: 'Done' })),
    copyStatus);

  function showKey(key, title) {
    panelTitle.textContent = title;
    keyOut.value = key;
    copyStatus.textContent = '';
    panel.hidden = false;
    keyOut.focus();
    keyOut.select();
  }
  function hidePanel() {
    keyOut.value = '';
    panel.hidden = true;
    nameIn.focus();
  }
  async function copyKey() {
    try {
      await navigator.clipboard.writeText(keyOut.value);
      copyStatus.textContent = 'Copied to clipboard.';
    } catch {
      keyOut.focus();
      keyOut.select();
      let ok = false;
      try { ok = document.execCommand('copy'); } catch { /* unsupported */ }
      copyStatus.textContent = ok ? 'Copied to clipboard.' : 'The key is selected: press Ctrl+C (⌘C on a Mac) to copy it.';
    }
  }

  // --- create form ---
  const nameIn = h('input', { id: 'key-name', name: 'name', maxlength: 100, autocomplete: 'off', placeholder: 'e.g. laptop' });
  const kindSel = h('select', { id: 'key-kind', name: 'kind' },
    h('option', { value: 'free', text: 'Free (trial tokens)' }), h('option', { value: 'premium', text: 'Premium (billed)' }));
  const rentalCb = h('input', { id: 'key-rental', name: 'rental', type: 'checkbox' });
  const createBtn = h('button', { type: 'submit', text: 'Create key' });
  const form = h('form', { id: 'create-key-form', class: 'form-row', onsubmit: createKey },
    h('div', { class: 'field' }, h('label', { for: 'key-name', text: 'Name' }), nameIn),
    h('div', { class: 'field' }, h('label', { for: 'key-kind', text: 'Kind' }), kindSel),
    h('div', { class: 'check' }, rentalCb, h('label', { for: 'key-rental', text: 'GPU Rentals scope' })),
    createBtn);

  async function createKey(ev) {
    ev.preventDefault();
    clearMessages();
    await busy(createBtn, async () => {
      try {
        const res = await api('/keys', { body: { kind: kindSel.value, name: nameIn.value.trim(), rental: rentalCb.checked } });
        form.reset();
        showKey(res.key, `Your new API key${res.info?.name ? ` “${res.info.name}”` : ''}`);
        await loadKeys();
      } catch (err) { showError(err); }
    });
  }

  // --- keys table ---
  const { wrap, tbody } = dataTable({
    id: 'keys-table', label: 'API keys',
    headers: ['Name', 'Key', 'Kind', 'Scopes', 'Max active rentals', 'Created', 'Last used', 'Status', 'Actions'],
  });

  function row(k) {
    const revoked = k.revoked_at != null;
    const scopes = Array.isArray(k.scopes) ? k.scopes : [];
    return h('tr', { 'data-row': k.id, 'data-key-id': k.id, class: revoked ? 'revoked' : null },
      h('td', { text: k.name || '(unnamed)' }),
      h('td', null, h('code', { text: k.display ?? '' })),
      h('td', { text: k.kind ?? '' }),
      h('td', { text: scopes.join(', ') || '—' }),
      h('td', { text: String(k.max_active_rentals ?? 0) }),
      h('td', null, timeEl(k.created_at)),
      h('td', null, timeEl(k.last_used_at, 'Never')),
      h('td', null, h('span', { class: `status ${revoked ? 'status-off' : 'status-ok'}`, text: revoked ? 'revoked' : 'active' })),
      h('td', { class: 'actions' }, revoked ? null : actions(k, scopes)));
  }

  function actions(k, scopes) {
    const rid = uid('rental');
    const mid = uid('max');
    const toggle = h('input', { type: 'checkbox', id: rid, class: 'rental-toggle', 'data-action': 'rental', checked: scopes.includes('rental') });
    toggle.addEventListener('change', () => patch(k, { rental: toggle.checked }, toggle, () => { toggle.checked = !toggle.checked; }));
    const maxIn = h('input', { type: 'number', id: mid, class: 'max-rentals', 'data-action': 'max', min: 0, step: 1, inputmode: 'numeric', value: String(k.max_active_rentals ?? 0) });
    const save = h('button', { type: 'submit', class: 'max-rentals-save small', 'data-action': 'max-save', text: 'Save' });
    const maxForm = h('form', { class: 'inline' },
      h('label', { for: mid, text: 'Max active rentals' }), maxIn, save);
    maxForm.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const n = Number(maxIn.value);
      if (maxIn.value.trim() === '' || !Number.isInteger(n) || n < 0) {
        showError('Max active rentals must be a whole number, 0 or more.');
        maxIn.focus();
        return;
      }
      patch(k, { max_active_rentals: n }, save);
    });
    return [
      h('div', { class: 'check' }, toggle, h('label', { for: rid, text: 'GPU Rentals' })),
      maxForm,
      h('div', { class: 'buttons' },
        h('button', { type: 'button', class: 'rotate small secondary', 'data-action': 'rotate', text: 'Rotate', onclick: (e) => rotate(k, e.currentTarget) }),
        h('button', { type: 'button', class: 'revoke small danger', 'data-action': 'revoke', text: 'Revoke', onclick: (e) => revoke(k, e.currentTarget) })),
    ];
  }

  const label = (k) => (k.name ? `“${k.name}”` : k.display || 'key');

  async function patch(k, body, control, undo) {
    if (control.dataset.busy) { undo?.(); return; }
    clearMessages();
    await busy(control, async () => {
      try {
        const info = unwrap(await api(`/keys/${encodeURIComponent(k.id)}`, { method: 'PATCH', body }), 'info');
        replaceRow(tbody, k.id, row({ ...k, ...info }));
        showNotice(`Key ${label(k)} updated.`);
      } catch (err) {
        undo?.();
        showError(err);
      }
    });
  }

  async function rotate(k, btn) {
    clearMessages();
    await busy(btn, async () => {
      try {
        const res = await api(`/keys/${encodeURIComponent(k.id)}/rotate`, { method: 'POST' });
        await loadKeys();
        showKey(res.key, `New secret for key ${label(k)}`);
        showNotice(`Key ${label(k)} rotated. The old secret no longer works.`);
      } catch (err) { showError(err); }
    });
  }

  async function revoke(k, btn) {
    if (!confirm(`Revoke key ${label(k)}? Applications using it will stop working. This cannot be undone.`)) return;
    clearMessages();
    await busy(btn, async () => {
      try {
        const info = unwrap(await api(`/keys/${encodeURIComponent(k.id)}/revoke`, { method: 'POST' }), 'info');
        replaceRow(tbody, k.id, row({ ...k, revoked_at: Math.floor(Date.now() / 1000), ...info }));
        showNotice(`Key ${label(k)} revoked.`);
      } catch (err) { showError(err); }
    });
  }

  async function loadKeys() {
    const res = await api('/keys', { signal });
    fillRows(tbody, (res?.data ?? []).map(row), 'No keys yet. Create one above.');
  }

  async function loadAccount() {
    const a = await api('/account', { signal });
    balance.textContent = fmtMoney(a.balance_usd);
    balance.dataset.value = String(a.balance_usd);
    trial.textContent = `${fmtInt(a.trial_tokens_remaining)} tokens`;
    trial.dataset.value = String(a.trial_tokens_remaining);
    trialUsed.textContent = `${fmtInt(a.trial_tokens_used)} used`;
  }

  put(view,
    stats,
    panel,
    section('Create a key', form),
    section('Your keys', wrap));

  const results = await Promise.allSettled([loadAccount(), loadKeys()]);
  for (const r of results) if (r.status === 'rejected' && !signal.aborted) showError(r.reason);
}
