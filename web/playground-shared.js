// What the playground's tools share: the call to /v1 as the signed-in account, a model picker, and
// the small pieces an answer is shown with (a probability bar, a token count).
import { ApiError, apiRaw } from './api.js';
import { h, put, replace, fmtInt, setAlert, errText } from './dom.js';

/** POST `body` to a /v1 path as the signed-in account and read the JSON answer (one that is not JSON is an error, not a blank result). */
export async function callV1Json(path, body, signal) {
  const res = await apiRaw(path, body, signal);
  try { return await res.json(); } catch { throw new ApiError('The server sent a response that could not be read.', { status: res.status }); }
}

/** Options for the models (once each: on a cluster several nodes may list one model). */
export function fillSelect(sel, models, emptyText) {
  const seen = new Set();
  const unique = models.filter((m) => typeof m?.id === 'string' && !seen.has(m.id) && seen.add(m.id));
  replace(sel);
  if (!unique.length) put(sel, h('option', { value: '', text: emptyText }));
  for (const m of unique) put(sel, h('option', { value: m.id, text: m.name && m.name !== m.id ? `${m.name} (${m.id})` : m.id }));
}

/** A model picker (label + select) whose options come later from fillSelect. */
export function modelPicker(id, label) {
  const select = h('select', { id }, h('option', { value: '', text: 'Loading models…' }));
  return { select, field: h('div', { class: 'field' }, h('label', { for: id, text: label }), select) };
}

/** 0.8312 -> "83.1%"; a probability that is not a number -> "—". */
export function fmtPercent(p) {
  const v = Number(p);
  if (p == null || !Number.isFinite(v)) return '—';
  return `${(v * 100).toFixed(1)}%`;
}

/**
 * A list of labelled probabilities, each with a bar. The bar's width is set through the CSSOM (the
 * console's CSP refuses style attributes); it is decoration: the percentage is the text read out.
 */
export function probabilityList(items, label) {
  return h('ul', { class: 'prob-list', 'aria-label': label }, items.map(({ name, probability, best }) => {
    const fill = h('span', { class: 'prob-fill' });
    const v = Number(probability);
    fill.style.width = `${Number.isFinite(v) ? Math.min(100, Math.max(0, v * 100)) : 0}%`;
    return h('li', { class: best ? 'prob best' : 'prob' },
      h('span', { class: 'prob-name', text: name }),
      h('span', { class: 'prob-bar', 'aria-hidden': 'true' }, fill),
      h('span', { class: 'prob-value', text: fmtPercent(probability) }));
  }));
}

/** "Usage: 42 input tokens (12 cached)". */
export function usageLine(inputTokens, cachedTokens) {
  if (inputTokens == null) return null;
  const cached = Number(cachedTokens) > 0 ? ` (${fmtInt(cachedTokens)} cached)` : '';
  return h('p', { class: 'muted usage-line', text: `Usage: ${fmtInt(inputTokens)} input ${Number(inputTokens) === 1 ? 'token' : 'tokens'}${cached}` });
}

/**
 * One request of a tool at a time: `submit(ev)` runs `check()` (it shows its own problem and
 * returns null, or returns what `send` needs), then `send(value, signal)`, whose nodes replace the
 * output; the button and output marked busy meanwhile, an error shown by its message. The page's
 * `signal` (it is left) aborts the request.
 */
export function toolRunner({ signal, button, output, status, errEl, busyText, check, send }) {
  let ctl = null;
  signal.addEventListener('abort', () => ctl?.abort());
  return async (ev) => {
    ev.preventDefault();
    if (ctl) return;
    setAlert(errEl, '');
    const value = check();
    if (value == null) return;
    ctl = new AbortController();
    button.setAttribute('aria-disabled', 'true');
    output.setAttribute('aria-busy', 'true');
    replace(output);
    status.textContent = busyText;
    try {
      replace(output, ...(await send(value, ctl.signal)));
      status.textContent = 'Done.';
    } catch (err) {
      status.textContent = '';
      setAlert(errEl, errText(err));
    } finally {
      ctl = null;
      output.removeAttribute('aria-busy');
      button.removeAttribute('aria-disabled');
    }
  };
}
