// How a conversation's messages are shown: the user's text and images; the answer's Markdown
// (web/markdown.js: built from DOM nodes, model output never becomes markup), its reasoning folded,
// its tool calls, generated images, and a line with what it used and cost. The actions: Edit
// (a user message: change it and send again) and Regenerate (the last answer).
import { h, put, replace, fmtInt, fmtMoney } from './dom.js';
import { renderMarkdown } from './markdown.js';

const FINISH = {
  stopped: 'Stopped',
  length: 'Cut at the max tokens',
  content_filter: 'Stopped by a filter',
  error: 'Failed',
};

/** "Stopped · 12 in · 7 out (3 cached) · $0.000021" — what an answer used and cost. */
export function usageText(msg) {
  const u = msg.usage ?? {};
  const parts = [];
  if (FINISH[msg.finish]) parts.push(FINISH[msg.finish]);
  if (u.input_tokens != null) parts.push(`${fmtInt(u.input_tokens)} in`);
  if (u.output_tokens != null) parts.push(`${fmtInt(u.output_tokens)} out${u.cached_tokens ? ` (${fmtInt(u.cached_tokens)} cached)` : ''}`);
  if (msg.images?.length && msg.role === 'assistant') parts.push(`${fmtInt(msg.images.length)} ${msg.images.length === 1 ? 'image' : 'images'}`);
  if (u.cost_usd != null) parts.push(fmtMoney(u.cost_usd));
  return parts.join(' · ');
}

/** Tool calls as the model made them: name and arguments (pretty-printed when they are JSON). */
function toolCallsView(calls) {
  if (!calls?.length) return null;
  return h('div', { class: 'tool-calls' }, calls.map((c) => {
    let args = String(c.arguments ?? '');
    try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* shown as sent */ }
    return h('div', { class: 'tool-call' },
      h('p', { class: 'tool-call-head' }, h('span', { class: 'muted', text: 'Tool call ' }), h('code', { text: String(c.name ?? '') })),
      h('pre', { class: 'tool-call-args' }, h('code', { text: args })));
  }));
}

function imagesView(urls, alt) {
  if (!urls?.length) return null;
  return h('ul', { class: 'msg-images' }, urls.map((src, i) => h('li', null,
    h('img', { src, alt: alt(i), loading: 'lazy' }))));
}

/** Fills an answer's body (again, as its stream grows). */
export function fillAnswer(body, msg, { streaming = false, prompt = '' } = {}) {
  const content = h('div', { class: 'md msg-content' });
  if (msg.content) put(content, renderMarkdown(msg.content));
  const reasoning = msg.reasoning
    ? h('details', { class: 'reasoning' }, h('summary', { text: streaming && !msg.content ? 'Reasoning…' : 'Reasoning' }), h('div', { class: 'pre', text: msg.reasoning }))
    : null;
  // A reasoning block the reader opened stays open while the answer streams on.
  const was = body.querySelector(':scope > details.reasoning');
  if (reasoning && was?.open) reasoning.open = true;
  replace(body,
    reasoning,
    msg.content || !streaming ? content : null,
    toolCallsView(msg.tool_calls),
    imagesView(msg.images, (i) => `generated image ${i + 1}${prompt ? ` for: ${prompt}` : ''}`),
    msg.error ? h('p', { class: 'alert msg-error', text: msg.error }) : null,
    streaming && !msg.content && !msg.reasoning && !msg.tool_calls?.length ? h('p', { class: 'muted', text: 'Waiting for the model…' }) : null,
    !streaming && !msg.content && !msg.tool_calls?.length && !msg.images?.length && !msg.error ? h('p', { class: 'muted', text: '(no text)' }) : null);
}

/**
 * One message as an <article>. `actions`: {edit(seq)} for a user message, {regenerate(seq)} for
 * the last answer; omitted while a turn runs. `prompt`: the user message an answer answers (the
 * generated images' alternative text).
 */
export function messageView(msg, { seq, actions = {}, streaming = false, prompt = '' }) {
  const user = msg.role === 'user';
  const head = h('p', { class: 'msg-head' },
    h('span', { class: 'msg-role', text: user ? 'You' : 'Assistant' }),
    !user && msg.model ? h('span', { class: 'muted small', text: ` · ${msg.model}` }) : null);
  const body = h('div', { class: 'msg-body' });
  if (user) {
    put(body, h('div', { class: 'msg-text pre', text: msg.content }), imagesView(msg.images, (i) => `image ${i + 1} attached to this message`));
  } else {
    body.dataset.prompt = prompt;
    fillAnswer(body, msg, { streaming, prompt });
  }
  const meta = h('p', { class: 'msg-meta muted small', 'aria-live': 'off', text: user ? '' : usageText(msg) });
  const buttons = [];
  if (user && actions.edit) buttons.push(h('button', { type: 'button', class: 'small secondary', 'data-action': 'edit', 'aria-label': `Edit message ${seq + 1} and send it again`, text: 'Edit', onclick: () => actions.edit(seq) }));
  if (!user && actions.regenerate) buttons.push(h('button', { type: 'button', class: 'small secondary', 'data-action': 'regenerate', 'aria-label': 'Regenerate the last answer', text: 'Regenerate', onclick: () => actions.regenerate(seq) }));
  return h('article', { class: `msg ${user ? 'msg-user' : 'msg-assistant'}`, 'data-seq': seq, 'aria-label': user ? `Message ${seq + 1}, from you` : `Message ${seq + 1}, the answer` },
    head, body, user ? null : meta, buttons.length ? h('div', { class: 'msg-actions' }, buttons) : null);
}

/** A user message turned into a form: change the text, then send it again (the answers after it are replaced). */
export function editForm(msg, seq, { onSave, onCancel }) {
  const id = `chat-edit-${seq}`;
  const area = h('textarea', { id, rows: 3 });
  area.value = msg.content;
  const form = h('form', { class: 'msg-edit', novalidate: true },
    h('label', { for: id, text: 'Edit your message' }), area,
    h('div', { class: 'buttons' },
      h('button', { type: 'submit', class: 'small', text: 'Send again' }),
      h('button', { type: 'button', class: 'small secondary', text: 'Cancel', onclick: onCancel })));
  form.addEventListener('submit', (ev) => { ev.preventDefault(); const text = area.value.trim(); if (text) onSave(text); else area.focus(); });
  area.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); form.requestSubmit(); }
    if (ev.key === 'Escape') { ev.preventDefault(); ev.stopPropagation(); onCancel(); }
  });
  return { form, area };
}
