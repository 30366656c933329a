// Admin page: all accounts, with a credit form per row.
import { api, unwrap } from './api.js';
import { h, uid, fmtMoney, fmtInt, dataTable, fillRows, replaceRow, showError, showNotice, clearMessages, busy, put } from './dom.js';

export async function render({ view, signal }) {
  const { wrap, tbody } = dataTable({
    id: 'accounts-table', label: 'Accounts',
    headers: ['Name', 'Role', 'Balance', 'Trial tokens remaining', 'Active keys', 'Credit'],
  });
  put(view, wrap);

  function row(a) {
    const inputId = uid('credit');
    const amount = h('input', { id: inputId, type: 'number', step: 'any', inputmode: 'decimal', class: 'credit-usd', 'data-action': 'amount', required: true });
    const btn = h('button', { type: 'submit', class: 'credit small', 'data-action': 'credit', text: 'Credit' });
    const form = h('form', { class: 'inline' }, h('label', { for: inputId, text: 'Credit USD' }), amount, btn);
    form.addEventListener('submit', (ev) => { ev.preventDefault(); credit(a, amount, btn); });
    return h('tr', { 'data-row': a.name, 'data-account': a.name },
      h('td', { text: a.name }),
      h('td', { text: a.role ?? '' }),
      h('td', { class: 'num', text: fmtMoney(a.balance_usd) }),
      h('td', { class: 'num', text: fmtInt(a.trial_tokens_remaining) }),
      h('td', { class: 'num', text: fmtInt(a.active_keys) }),
      h('td', null, form));
  }

  async function credit(a, input, btn) {
    clearMessages();
    const usd = Number(input.value);
    if (input.value.trim() === '' || !Number.isFinite(usd) || usd === 0) {
      showError('Enter an amount in US dollars (for example 10 or 2.50).');
      input.focus();
      return;
    }
    await busy(btn, async () => {
      try {
        const updated = { ...a, ...unwrap(await api(`/admin/accounts/${encodeURIComponent(a.name)}/credit`, { body: { usd } }), 'account') };
        replaceRow(tbody, a.name, row(updated));
        showNotice(`Credited ${fmtMoney(usd)} to ${a.name}. New balance: ${fmtMoney(updated.balance_usd)}.`);
      } catch (err) { showError(err); }
    });
  }

  const res = await api('/admin/accounts', { signal });
  fillRows(tbody, (res?.data ?? []).map(row), 'No accounts.');
}
