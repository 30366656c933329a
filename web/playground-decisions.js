// Playground: Decisions (POST /v1/decisions) — an input and up to 10 typed questions answered from a
// chat model's own probabilities (or, for predicates, a classifier's entailment): each answer's
// probabilities as a bar list, its confidence, its score where it has one, or the refusal.
import { h, put, setAlert, uid } from './dom.js';
import { callV1Json, fillSelect, modelPicker, probabilityList, fmtPercent, usageLine, toolRunner } from './playground-shared.js';

/** The most questions a request may ask (the server's limit; more is its named 400). */
const MAX_QUESTIONS = 10;

const TYPES = {
  predicate: { option: 'Predicate (yes or no)', ask: 'Statement', values: null },
  choice: { option: 'Choice', ask: 'Question', values: 'Choices (one per line)' },
  score: { option: 'Score', ask: 'Question', values: 'Levels, lowest first (one per line)' },
};

/** One question's fields, in a fieldset numbered by its place. */
function questionEditor(onRemove, preset = {}) {
  const id = uid('pg-q');
  const typeSel = h('select', { id: `${id}-type`, class: 'q-type' },
    Object.entries(TYPES).map(([value, t]) => h('option', { value, text: t.option })));
  typeSel.value = preset.type ?? 'predicate';
  const nameIn = h('input', { id: `${id}-name`, class: 'q-name', type: 'text', autocomplete: 'off', spellcheck: 'false' });
  const askLabel = h('label', { for: `${id}-ask` });
  const askIn = h('textarea', { id: `${id}-ask`, class: 'q-ask', rows: 2 });
  askIn.value = preset.instructions ?? '';
  const valuesLabel = h('label', { for: `${id}-values` });
  const valuesIn = h('textarea', { id: `${id}-values`, class: 'q-values', rows: 3, spellcheck: 'false' });
  valuesIn.value = preset.values ?? '';
  const valuesField = h('div', { class: 'field' }, valuesLabel, valuesIn);
  const legend = h('legend');
  const removeBtn = h('button', { type: 'button', class: 'secondary small q-remove' });
  const box = h('fieldset', { class: 'question', id },
    legend,
    h('div', { class: 'form-row' },
      h('div', { class: 'field' }, h('label', { for: `${id}-type`, text: 'Type' }), typeSel),
      h('div', { class: 'field' }, h('label', { for: `${id}-name`, text: 'Name (optional)' }), nameIn)),
    h('div', { class: 'field' }, askLabel, askIn),
    valuesField,
    h('div', { class: 'buttons' }, removeBtn));

  const showType = () => {
    const t = TYPES[typeSel.value] ?? TYPES.predicate;
    askLabel.textContent = t.ask;
    valuesLabel.textContent = t.values ?? '';
    valuesField.hidden = !t.values;
  };
  typeSel.addEventListener('change', showType);
  removeBtn.addEventListener('click', () => onRemove(editor));
  showType();

  const editor = {
    box,
    /** Number it (1-based) and say whether it may be removed (not the only one). */
    number(n, removable) {
      legend.textContent = `Question ${n}`;
      removeBtn.textContent = 'Remove';
      removeBtn.setAttribute('aria-label', `Remove question ${n}`);
      removeBtn.hidden = !removable;
    },
    focus: () => askIn.focus(),
    /** The question as the API takes it, or a message saying what is missing. */
    read(n) {
      const type = typeSel.value;
      const instructions = askIn.value.trim();
      const name = nameIn.value.trim();
      const q = { type, ...(name ? { name } : {}) };
      if (type === 'predicate') {
        if (!instructions) return { error: `Question ${n}: write the statement to judge.`, field: askIn };
        return { question: { ...q, instructions } };
      }
      const lines = valuesIn.value.split('\n').map((l) => l.trim()).filter(Boolean);
      if (lines.length < 2) return { error: `Question ${n}: give at least two ${type === 'choice' ? 'choices' : 'levels'}, one per line.`, field: valuesIn };
      if (instructions) q.instructions = instructions;
      return { question: type === 'choice' ? { ...q, choices: lines.map((value) => ({ value })) } : { ...q, levels: lines.map((label) => ({ label })) } };
    },
  };
  return editor;
}

/** One answer, under its question's name (or its number). */
function answerView(answer, question, n) {
  const title = answer?.name || question?.name || `Question ${n}`;
  const asked = question?.instructions ? h('p', { class: 'muted small', text: question.instructions }) : null;
  const head = [h('h3', { text: title }), asked];
  const type = answer?.type;
  if (type === 'predicate') {
    const p = Number(answer.probability);
    return h('li', { class: 'answer', 'data-type': type }, head,
      h('p', { class: 'verdict', text: `Answer: ${p >= 0.5 ? 'yes' : 'no'} (P(yes) = ${fmtPercent(p)})` }),
      probabilityList([{ name: 'yes', probability: p, best: p >= 0.5 }, { name: 'no', probability: 1 - p, best: p < 0.5 }], `${title}: probabilities`));
  }
  if (type === 'choice') {
    const probs = Array.isArray(answer.probabilities) ? answer.probabilities : [];
    return h('li', { class: 'answer', 'data-type': type }, head,
      h('p', { class: 'verdict', text: `Answer: ${String(answer.choice ?? '—')} · confidence ${fmtPercent(answer.confidence)}` }),
      probabilityList(probs.map((x) => ({ name: String(x.value), probability: x.probability, best: x.value === answer.choice })), `${title}: probabilities`));
  }
  if (type === 'score') {
    const probs = Array.isArray(answer.probabilities) ? answer.probabilities : [];
    const top = probs.length ? probs.length - 1 : null;
    const score = Number.isFinite(Number(answer.score)) ? Number(answer.score).toFixed(2) : '—';
    const best = probs.reduce((b, x) => (b == null || Number(x.probability) > Number(b.probability) ? x : b), null);
    return h('li', { class: 'answer', 'data-type': type }, head,
      h('p', { class: 'verdict', text: `Score: ${score}${top != null ? ` on 0–${top}` : ''} · most likely ${best ? best.label : '—'} · confidence ${fmtPercent(answer.confidence)}` }),
      probabilityList(probs.map((x) => ({ name: x.label, probability: x.probability, best: x === best })), `${title}: probabilities`));
  }
  if (type === 'refusal') {
    const why = typeof answer.refusal === 'string' && answer.refusal ? answer.refusal : 'The model gave none of the offered answers any probability.';
    return h('li', { class: 'answer refusal', 'data-type': type }, head, h('p', { class: 'verdict', text: `Refused: ${why}` }));
  }
  return h('li', { class: 'answer', 'data-type': 'unknown' }, head, h('p', { class: 'verdict muted', text: 'The server sent an answer of a kind this page does not know.' }));
}

/** The Decisions form; `fill(models)` puts the chat and classifier models in its picker. */
export function decisionsTool({ signal }) {
  const errEl = h('div', { class: 'alert', role: 'alert', id: 'pg-dec-error', hidden: true });
  const model = modelPicker('pg-dec-model', 'Chat or classifier model');
  const inputIn = h('textarea', { id: 'pg-dec-input', rows: 3 });
  const list = h('div', { class: 'questions' });
  const addBtn = h('button', { type: 'button', id: 'pg-dec-add', class: 'secondary', text: 'Add question' });
  const askBtn = h('button', { type: 'submit', id: 'pg-decide', text: 'Decide' });
  const status = h('p', { id: 'pg-dec-status', class: 'muted', role: 'status' });
  const output = h('div', { id: 'pg-dec-output', class: 'output', 'aria-live': 'polite' });
  const form = h('form', { id: 'pg-dec-form', novalidate: true }, errEl, model.field,
    h('div', { class: 'field' }, h('label', { for: 'pg-dec-input', text: 'Input' }), inputIn),
    list,
    h('div', { class: 'buttons' }, addBtn, askBtn), status, output);

  const editors = [];
  const renumber = () => {
    editors.forEach((e, i) => e.number(i + 1, editors.length > 1));
    addBtn.hidden = editors.length >= MAX_QUESTIONS;
  };
  const remove = (e) => {
    const at = editors.indexOf(e);
    if (at < 0 || editors.length === 1) return;
    editors.splice(at, 1);
    e.box.remove();
    renumber();
    (editors[at] ?? editors[at - 1]).focus();
  };
  const add = (preset) => {
    const e = questionEditor(remove, preset);
    editors.push(e);
    put(list, e.box);
    renumber();
    return e;
  };
  add({ type: 'predicate' });
  addBtn.addEventListener('click', () => { if (editors.length < MAX_QUESTIONS) add().focus(); });

  form.addEventListener('submit', toolRunner({
    signal, button: askBtn, output, status, errEl, busyText: 'Asking the model…',
    check() {
      if (!model.select.value) return setAlert(errEl, 'No chat or classifier model is available.'), null;
      const input = inputIn.value.trim();
      if (!input) { setAlert(errEl, 'Write the input to judge first.'); inputIn.focus(); return null; }
      const read = editors.map((e, i) => e.read(i + 1));
      const bad = read.find((r) => r.error);
      if (bad) { setAlert(errEl, bad.error); bad.field.focus(); return null; }
      return { input, questions: read.map((r) => r.question) };
    },
    async send({ input, questions }, sig) {
      const res = await callV1Json('/v1/decisions', { model: model.select.value, input, questions }, sig);
      const answers = Array.isArray(res?.answers) ? res.answers : [];
      return [
        h('ol', { class: 'answers', id: 'pg-dec-answers' }, answers.map((a, i) => answerView(a, questions[i], i + 1))),
        usageLine(res?.usage?.input_tokens, res?.usage?.input_tokens_details?.cached_tokens),
      ];
    },
  }));

  return {
    form,
    fill(all, emptyText) {
      fillSelect(model.select, emptyText ? [] : all.filter((m) => m.kind === 'chat' || m.kind === 'classifier'), emptyText ?? 'No chat or classifier models installed');
    },
  };
}
