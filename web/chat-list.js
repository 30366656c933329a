// The chat page's list of the account's conversations (kept in the store, newest first): search by
// title, open, rename, delete, and start a new one.
import { api } from './api.js';
import { h, replace, setAlert, errText, timeEl, busy } from './dom.js';

const SEARCH_DELAY_MS = 250;

/**
 * `onOpen(id)` opens a conversation; `onNew()` starts a new one; `onRenamed(conv)` and
 * `onDeleted(id)` tell the page about changes made here.
 */
export function conversationList({ signal, onOpen, onNew, onRenamed, onDeleted }) {
  const errEl = h('div', { class: 'alert', role: 'alert', id: 'chat-list-error', hidden: true });
  const search = h('input', { id: 'chat-search', type: 'search', autocomplete: 'off', placeholder: 'Search titles' });
  const list = h('ul', { class: 'conv-list', id: 'chat-conversations' });
  const newBtn = h('button', { type: 'button', id: 'chat-new', text: 'New conversation', onclick: () => onNew() });
  const status = h('p', { class: 'muted small', role: 'status', id: 'chat-list-status' });
  const el = h('nav', { class: 'chat-side', 'aria-label': 'Conversations' },
    newBtn,
    h('div', { class: 'field' }, h('label', { for: 'chat-search', text: 'Search conversations' }), search),
    errEl, status, list);

  let current = null;
  let timer = 0;
  let rows = [];

  function item(c) {
    const open = h('button', { type: 'button', class: 'conv-open', 'data-conv-id': c.id, 'aria-current': c.id === current ? 'true' : null, onclick: () => onOpen(c.id) },
      h('span', { class: 'conv-title', text: c.title }),
      h('span', { class: 'muted small conv-time' }, timeEl(c.updated_at)));
    const rename = h('button', { type: 'button', class: 'small secondary', 'data-action': 'rename', 'aria-label': `Rename “${c.title}”`, text: 'Rename', onclick: () => startRename(li, c) });
    const del = h('button', { type: 'button', class: 'small danger', 'data-action': 'delete', 'aria-label': `Delete “${c.title}”`, text: 'Delete', onclick: (e) => remove(c, e.currentTarget) });
    const li = h('li', { 'data-conv': c.id, class: c.id === current ? 'current' : null }, open, h('div', { class: 'conv-actions' }, rename, del));
    return li;
  }

  function startRename(li, c) {
    const id = `chat-rename-${c.id}`;
    const input = h('input', { id, type: 'text', maxlength: 200, required: true });
    input.value = c.title;
    const form = h('form', { class: 'conv-rename', novalidate: true },
      h('label', { for: id, text: 'New title' }), input,
      h('div', { class: 'buttons' }, h('button', { type: 'submit', class: 'small', text: 'Save' }),
        h('button', { type: 'button', class: 'small secondary', text: 'Cancel', onclick: () => draw() })));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const title = input.value.trim();
      if (!title) { setAlert(errEl, 'A title cannot be empty.'); input.focus(); return; }
      try {
        const conv = await api(`/conversations/${encodeURIComponent(c.id)}`, { method: 'PATCH', body: { title } });
        setAlert(errEl, '');
        onRenamed(conv);
        await load();
        list.querySelector(`[data-conv-id="${CSS.escape(c.id)}"]`)?.focus();
      } catch (err) { setAlert(errEl, errText(err)); }
    });
    input.addEventListener('keydown', (ev) => { if (ev.key === 'Escape') { ev.preventDefault(); ev.stopPropagation(); draw(); } });
    replace(li, form);
    input.focus();
    input.select();
  }

  async function remove(c, btn) {
    if (!confirm(`Delete the conversation “${c.title}”? Its messages are deleted with it.`)) return;
    await busy(btn, async () => {
      try {
        await api(`/conversations/${encodeURIComponent(c.id)}`, { method: 'DELETE' });
        setAlert(errEl, '');
        onDeleted(c.id);
        await load();
        status.textContent = `Deleted “${c.title}”.`;
        (list.querySelector('.conv-open') ?? newBtn).focus();
      } catch (err) { setAlert(errEl, errText(err)); }
    });
  }

  function draw() {
    replace(list, rows.map(item));
    if (!rows.length) replace(list, h('li', { class: 'muted small empty', text: search.value.trim() ? 'No conversation has that in its title.' : 'No conversations yet.' }));
  }

  async function load() {
    const q = search.value.trim();
    const res = await api(`/conversations${q ? `?q=${encodeURIComponent(q)}` : ''}`, { signal });
    rows = res?.data ?? [];
    draw();
  }

  search.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => load().catch((err) => { if (!signal.aborted) setAlert(errEl, errText(err)); }), SEARCH_DELAY_MS);
  });
  signal.addEventListener('abort', () => clearTimeout(timer));

  return {
    el,
    load,
    /** Marks the conversation open now. */
    select(id) { current = id; draw(); },
  };
}
