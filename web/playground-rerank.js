// Playground: Rerank (POST /v1/rerank) — a query and documents, one per line, ranked by a reranker
// model: each result's rank, document and relevance score, the documents the server cut to fit
// the model (meta.truncated, meta.warnings), and the tokens read.
import { h, setAlert, fmtInt, dataTable, fillRows } from './dom.js';
import { callV1Json, fillSelect, modelPicker, usageLine, toolRunner } from './playground-shared.js';

/** The server's limit on documents per request (more is its named 400). */
const MAX_DOCUMENTS = 1000;

/** Characters of a document shown in the results (a long one is cut here; the model read it all, or as much as fits). */
const SHOWN = 240;
const shown = (text) => (text.length > SHOWN ? `${text.slice(0, SHOWN)}…` : text);

/** A relevance score as text: four decimals, or "—" when it is not a number. */
const fmtScore = (s) => (Number.isFinite(Number(s)) && s != null ? Number(s).toFixed(4) : '—');

/** "Cut to fit the model (512 tokens a pair): document 2 (14 tokens cut), document 5 (3 tokens cut)." */
function cutNote(meta, docs) {
  const cut = Array.isArray(meta?.truncated) ? meta.truncated : [];
  const warnings = Array.isArray(meta?.warnings) ? meta.warnings.filter((w) => typeof w === 'string' && w) : [];
  if (!cut.length && !warnings.length) return null;
  const limit = Number(meta?.max_tokens_per_pair) > 0 ? ` (${fmtInt(meta.max_tokens_per_pair)} tokens a pair)` : '';
  const items = cut.map((c) => {
    const n = Number(c.index) + 1;
    const preview = docs[c.index] != null ? ` “${docs[c.index].length > 40 ? `${docs[c.index].slice(0, 40)}…` : docs[c.index]}”` : '';
    return h('li', { text: `document ${fmtInt(n)}${preview}: ${fmtInt(c.cut_tokens)} ${Number(c.cut_tokens) === 1 ? 'token' : 'tokens'} cut from its end` });
  });
  return h('div', { class: 'panel highlight cut-note', id: 'pg-rr-cut', role: 'note' },
    cut.length ? h('p', { text: `Cut to fit the model${limit}:` }) : null,
    cut.length ? h('ul', null, items) : null,
    warnings.map((w) => h('p', { class: 'small', text: w })));
}

/** The Rerank form; `fill(models)` puts the reranker models in its picker. */
export function rerankTool({ signal }) {
  const errEl = h('div', { class: 'alert', role: 'alert', id: 'pg-rr-error', hidden: true });
  const model = modelPicker('pg-rr-model', 'Reranker model');
  const queryIn = h('input', { id: 'pg-rr-query', type: 'text' });
  const docsIn = h('textarea', { id: 'pg-rr-docs', rows: 5, 'aria-describedby': 'pg-rr-docs-help' });
  const topIn = h('input', { id: 'pg-rr-top-n', type: 'number', min: 1, step: 1, inputmode: 'numeric', 'aria-describedby': 'pg-rr-top-n-help' });
  const rankBtn = h('button', { type: 'submit', id: 'pg-rerank', text: 'Rerank' });
  const status = h('p', { id: 'pg-rr-status', class: 'muted', role: 'status' });
  const output = h('div', { id: 'pg-rr-output', class: 'output', 'aria-live': 'polite' });
  const form = h('form', { id: 'pg-rr-form', novalidate: true }, errEl, model.field,
    h('div', { class: 'field' }, h('label', { for: 'pg-rr-query', text: 'Query' }), queryIn),
    h('div', { class: 'field' }, h('label', { for: 'pg-rr-docs', text: 'Documents' }), docsIn,
      h('p', { id: 'pg-rr-docs-help', class: 'muted small', text: `One document a line, up to ${fmtInt(MAX_DOCUMENTS)}.` })),
    h('div', { class: 'field' }, h('label', { for: 'pg-rr-top-n', text: 'Top N (optional)' }), topIn,
      h('p', { id: 'pg-rr-top-n-help', class: 'muted small', text: 'Show only the best N results; all when empty.' })),
    h('div', { class: 'buttons' }, rankBtn), status, output);

  form.addEventListener('submit', toolRunner({
    signal, button: rankBtn, output, status, errEl, busyText: 'Ranking…',
    check() {
      if (!model.select.value) return setAlert(errEl, 'No reranker model is available.'), null;
      const query = queryIn.value.trim();
      if (!query) { setAlert(errEl, 'Write a query first.'); queryIn.focus(); return null; }
      const docs = docsIn.value.split('\n').map((l) => l.trim()).filter(Boolean);
      if (!docs.length) { setAlert(errEl, 'Give at least one document, one a line.'); docsIn.focus(); return null; }
      const topText = topIn.value.trim();
      const topN = topText ? Number(topText) : null;
      if (topText && (!Number.isInteger(topN) || topN < 1)) { setAlert(errEl, 'Top N must be a whole number of 1 or more, or empty.'); topIn.focus(); return null; }
      return { query, docs, topN };
    },
    async send({ query, docs, topN }, sig) {
      const res = await callV1Json('/v1/rerank', { model: model.select.value, query, documents: docs, ...(topN ? { top_n: topN } : {}) }, sig);
      const results = Array.isArray(res?.results) ? res.results : [];
      const { wrap, tbody } = dataTable({ id: 'pg-rr-results', label: 'Ranked documents', headers: ['Rank', 'Document', 'Relevance score'] });
      fillRows(tbody, results.map((r, i) => h('tr', { 'data-row': String(r.index), 'data-index': String(r.index) },
        h('td', { class: 'num', text: fmtInt(i + 1) }),
        h('td', { class: 'doc-text' }, shown(docs[r.index] ?? r.document?.text ?? ''), h('div', { class: 'muted small', text: `document ${fmtInt(Number(r.index) + 1)}` })),
        h('td', { class: 'num score', text: fmtScore(r.relevance_score) }))), 'No results.');
      return [wrap, cutNote(res?.meta, docs), usageLine(res?.usage?.prompt_tokens ?? res?.meta?.billed_units?.input_tokens, null)];
    },
  }));

  return {
    form,
    fill(all, emptyText) {
      fillSelect(model.select, emptyText ? [] : all.filter((m) => m.kind === 'reranker'), emptyText ?? 'No reranker models installed');
    },
  };
}
