// DOM + formatting helpers. All server strings go through textContent / attributes, never innerHTML.
import { ApiError } from './api.js';

/** HTML-escape a string (for the rare case a string must become markup; DOM APIs are preferred). */
export function escape(s) {
  return String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

/**
 * The children worth rendering: the DOM's own append() and replaceChildren() write null, undefined
 * and false as the text "null", "undefined", "false" (the Usage page printed "null" under its
 * charts). Every child list in the console goes through here (h, put, replace).
 */
export function kids(children) {
  return children.flat(Infinity).filter((c) => c != null && c !== false && c !== true && c !== '').map((c) => (c instanceof Node ? c : String(c)));
}
/** el.append(...children), skipping what kids() skips. */
export const put = (el, ...children) => (el.append(...kids(children)), el);
/** el.replaceChildren(...children), skipping what kids() skips. */
export const replace = (el, ...children) => (el.replaceChildren(...kids(children)), el);

/** h('button', { class: 'x', onclick: fn, text: 'Go' }, ...children) */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (v == null || v === false) continue;
      if (k === 'text') el.textContent = String(v);
      else if (k === 'class') el.className = v;
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  el.append(...kids(children));
  return el;
}

let seq = 0;
export const uid = (prefix) => `${prefix}-${++seq}`;

// ---- formatting ----
const moneyFmt = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD', minimumFractionDigits: 2, maximumFractionDigits: 6 });
const intFmt = new Intl.NumberFormat('en-US');
const compactFmt = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });

/** $10.00, $0.0042, $1,234.50 */
export function fmtMoney(n) {
  const v = Number(n);
  if (n == null || !Number.isFinite(v)) return '—';
  if (v > 0 && v < 0.000001) return '<$0.000001';
  return moneyFmt.format(v);
}
export const fmtInt = (n) => (n == null || !Number.isFinite(Number(n)) ? '—' : intFmt.format(Number(n)));
export const fmtCompact = (n) => compactFmt.format(Number(n) || 0);

/** Unix seconds -> local date-time string. */
export function fmtTime(s) {
  if (s == null || s === '') return '—';
  const d = new Date(Number(s) * 1000);
  return Number.isNaN(d.getTime()) ? '—' : d.toLocaleString();
}
/** <time datetime> element for unix seconds (or a dash). */
export function timeEl(s, empty = '—') {
  if (s == null || s === '') return document.createTextNode(empty);
  const d = new Date(Number(s) * 1000);
  if (Number.isNaN(d.getTime())) return document.createTextNode(empty);
  return h('time', { datetime: d.toISOString(), text: d.toLocaleString() });
}

// ---- messages ----
/** Readable text for any error; '' for aborts and for "not signed in" (handled by the sign-in form). */
export function errText(err) {
  if (!err) return '';
  if (err.name === 'AbortError') return '';
  if (err instanceof ApiError && err.code === 'not_signed_in') return '';
  return typeof err === 'string' ? err : err.message || 'Something went wrong.';
}
export function setAlert(el, msg) {
  el.textContent = msg || '';
  el.hidden = !msg;
}
export function showError(err) {
  const msg = errText(err);
  if (msg) setAlert(document.getElementById('error'), msg);
}
export function showNotice(msg) {
  document.getElementById('error').hidden = true;
  document.getElementById('notice').textContent = msg || '';
}
export function clearMessages() {
  setAlert(document.getElementById('error'), '');
  document.getElementById('notice').textContent = '';
}

// ---- sections and tables ----
export function section(title, ...content) {
  const id = uid('sec');
  return h('section', { 'aria-labelledby': id }, h('h2', { id, text: title }), ...content);
}

/** A table with a header row, wrapped in a keyboard-scrollable region. */
export function dataTable({ id, label, headers }) {
  const tbody = h('tbody');
  const table = h('table', { id, 'aria-label': label },
    h('thead', null, h('tr', null, headers.map((t) => h('th', { scope: 'col', text: t })))), tbody);
  const wrap = h('div', { class: 'table-wrap', role: 'region', tabindex: 0, 'aria-label': `${label} (scrollable)` }, table);
  return { wrap, table, tbody };
}

function focusKey(container) {
  const a = document.activeElement;
  if (!a || a === document.body || !container.contains(a)) return null;
  const tr = a.closest('tr[data-row]');
  return tr ? { row: tr.dataset.row, action: a.dataset.action, wrap: container.closest('.table-wrap') } : null;
}
function restoreFocus(tbody, key) {
  if (!key) return;
  const tr = [...tbody.rows].find((r) => r.dataset.row === key.row);
  const target = (tr && key.action && tr.querySelector(`[data-action="${key.action}"]`))
    || tr?.querySelector('button, input, a') || key.wrap;
  target?.focus();
}

/** Replace all rows (keeps keyboard focus on the same control of the same row if it still exists). */
export function fillRows(tbody, rows, emptyText = 'Nothing here yet.') {
  const key = focusKey(tbody);
  const cols = tbody.parentElement?.querySelector('thead tr')?.children.length || 1;
  replace(tbody, ...(rows.length ? rows : [h('tr', { class: 'empty' }, h('td', { colspan: cols, text: emptyText }))]));
  restoreFocus(tbody, key);
}

/** Replace the row with data-row=rowId; returns false if it is not there. */
export function replaceRow(tbody, rowId, tr) {
  const old = [...tbody.rows].find((r) => r.dataset.row === String(rowId));
  if (!old) return false;
  const key = focusKey(old);
  old.replaceWith(tr);
  restoreFocus(tbody, key);
  return true;
}

/** Run load() again after `ms` (skipping while the tab is hidden) until the page's signal aborts. */
export function makePoller(signal, ms, load) {
  let timer = 0;
  const poller = {
    stop() { clearTimeout(timer); timer = 0; },
    schedule() {
      poller.stop();
      if (signal.aborted) return;
      timer = setTimeout(() => {
        timer = 0;
        if (signal.aborted) return;
        if (document.hidden) poller.schedule();
        else load();
      }, ms);
    },
  };
  signal.addEventListener('abort', poller.stop);
  return poller;
}

/**
 * A poller whose failed refresh shows its error once (not again on every retry), clears it when a
 * refresh succeeds again, and keeps trying; `load` schedules the next refresh itself on success.
 */
export function makeRefresher(signal, ms, load) {
  let failed = false;
  const poller = makePoller(signal, ms, async () => {
    try {
      await load();
      if (failed) { failed = false; clearMessages(); }
    } catch (err) {
      if (signal.aborted) return;
      if (!failed) showError(err);
      failed = true;
      poller.schedule();
    }
  });
  return poller;
}

/**
 * Mark a control busy while an async action runs; repeated activations are ignored meanwhile.
 * (aria-disabled rather than disabled, so keyboard focus is not thrown away.)
 */
export async function busy(control, fn) {
  if (control.dataset.busy) return undefined;
  control.dataset.busy = '1';
  control.setAttribute('aria-disabled', 'true');
  try { return await fn(); } finally {
    delete control.dataset.busy;
    control.removeAttribute('aria-disabled');
  }
}
