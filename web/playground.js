// Playground: call /v1 with one of the user's own API keys (kept in sessionStorage only): chat,
// image generation, decisions (playground-decisions.js) and rerank (playground-rerank.js).
import { api, ApiError } from './api.js';
import { h, section, setAlert, errText, put, replace } from './dom.js';
import { readSSE } from './sse.js';
import { callV1, fillSelect } from './playground-shared.js';
import { decisionsTool } from './playground-decisions.js';
import { rerankTool } from './playground-rerank.js';

const STORAGE = 'appliance.pg-key';
const store = {
  get() { try { return sessionStorage.getItem(STORAGE) || ''; } catch { return ''; } },
  set(v) { try { if (v) sessionStorage.setItem(STORAGE, v); else sessionStorage.removeItem(STORAGE); } catch { /* disabled */ } },
};

export async function render({ view, signal }) {
  // --- API key ---
  const keyIn = h('input', { id: 'pg-key', type: 'password', autocomplete: 'off', spellcheck: 'false', 'aria-describedby': 'pg-key-help', class: 'mono' });
  keyIn.value = store.get();
  keyIn.addEventListener('input', () => store.set(keyIn.value.trim()));
  const keyField = h('div', { class: 'field' },
    h('label', { for: 'pg-key', text: 'API key' }), keyIn,
    h('p', { id: 'pg-key-help', class: 'muted', text: 'Paste one of your own keys (sk-apl-…). It is kept only in this browser tab and is forgotten when you sign out or close the tab.' }));

  // --- chat ---
  const chatErr = h('div', { class: 'alert', role: 'alert', id: 'pg-error', hidden: true });
  const modelSel = h('select', { id: 'pg-model' }, h('option', { value: '', text: 'Loading models…' }));
  const modelWrap = h('div', { class: 'field' }, h('label', { for: 'pg-model', text: 'Chat model' }), modelSel);
  const promptIn = h('textarea', { id: 'pg-prompt', rows: 4, required: true });
  const sendBtn = h('button', { type: 'submit', id: 'pg-send', text: 'Send' });
  const stopBtn = h('button', { type: 'button', id: 'pg-stop', class: 'secondary', text: 'Stop', disabled: true });
  const status = h('p', { id: 'pg-status', class: 'muted', role: 'status' });
  const reasoning = h('div', { id: 'pg-reasoning', class: 'pre' });
  const reasoningBox = h('details', { class: 'reasoning', open: true, hidden: true }, h('summary', { text: 'Reasoning' }), reasoning);
  const answer = h('div', { id: 'pg-answer', class: 'pre' });
  const output = h('div', { id: 'pg-output', class: 'output', role: 'log', 'aria-live': 'polite', 'aria-label': 'Model output' }, reasoningBox, answer);
  const chatForm = h('form', { id: 'pg-chat-form', novalidate: true }, chatErr, modelWrap,
    h('div', { class: 'field' }, h('label', { for: 'pg-prompt', text: 'Prompt' }), promptIn),
    h('div', { class: 'buttons' }, sendBtn, stopBtn), status, output);

  // --- image ---
  const imgErr = h('div', { class: 'alert', role: 'alert', id: 'pg-image-error', hidden: true });
  const imgModelSel = h('select', { id: 'pg-image-model' }, h('option', { value: '', text: 'Loading models…' }));
  const imgModelWrap = h('div', { class: 'field' }, h('label', { for: 'pg-image-model', text: 'Image model' }), imgModelSel);
  const imgPrompt = h('input', { id: 'pg-image-prompt', type: 'text', required: true });
  const genBtn = h('button', { type: 'submit', id: 'pg-generate', text: 'Generate' });
  const imgStatus = h('p', { class: 'muted', role: 'status' });
  const imgBox = h('div', { class: 'image-box' });
  const imgForm = h('form', { id: 'pg-image-form', novalidate: true }, imgErr, imgModelWrap,
    h('div', { class: 'field' }, h('label', { for: 'pg-image-prompt', text: 'Image prompt' }), imgPrompt),
    h('div', { class: 'buttons' }, genBtn), imgStatus, imgBox);

  const requireKey = (errEl) => {
    const key = keyIn.value.trim();
    if (!key) { setAlert(errEl, 'Paste one of your API keys first.'); keyIn.focus(); }
    return key;
  };
  const decisions = decisionsTool({ requireKey, signal });
  const rerank = rerankTool({ requireKey, signal });

  put(view, keyField, section('Chat', chatForm), section('Image generation', imgForm),
    section('Decisions', h('p', { class: 'muted', text: 'Typed questions about an input, answered from the model\'s own probabilities (POST /v1/decisions): a predicate is yes or no, a choice one of its values, a score one of its levels.' }), decisions.form),
    section('Rerank', h('p', { class: 'muted', text: 'Documents ranked by their relevance to a query (POST /v1/rerank).' }), rerank.form));

  // --- chat streaming ---
  let chatCtl = null;
  signal.addEventListener('abort', () => chatCtl?.abort());
  stopBtn.addEventListener('click', () => chatCtl?.abort());

  chatForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (chatCtl) return;
    setAlert(chatErr, '');
    const key = requireKey(chatErr);
    if (!key) return;
    const model = modelSel.value;
    const prompt = promptIn.value.trim();
    if (!model) return setAlert(chatErr, 'No chat model is available.');
    if (!prompt) { setAlert(chatErr, 'Write a prompt first.'); promptIn.focus(); return; }

    chatCtl = new AbortController();
    reasoning.textContent = '';
    reasoningBox.hidden = true;
    answer.textContent = '';
    output.setAttribute('aria-busy', 'true');
    sendBtn.setAttribute('aria-disabled', 'true');
    stopBtn.disabled = false;
    status.textContent = 'Waiting for the model…';
    const append = (d) => {
      if (typeof d?.reasoning_content === 'string' && d.reasoning_content) {
        reasoningBox.hidden = false;
        put(reasoning, d.reasoning_content);
      }
      if (typeof d?.content === 'string' && d.content) put(answer, d.content);
    };
    try {
      const res = await callV1('/v1/chat/completions', key,
        { model, messages: [{ role: 'user', content: prompt }], stream: true, max_tokens: 128 }, chatCtl.signal);
      status.textContent = 'Receiving…';
      if (res.body && (res.headers.get('content-type') || '').includes('text/event-stream')) {
        await readSSE(res.body, (obj) => {
          if (obj.error) throw new ApiError(obj.error.message || 'The stream ended with an error.', { code: obj.error.code });
          append(obj.choices?.[0]?.delta);
        });
      } else {
        append((await res.json())?.choices?.[0]?.message); // server answered without streaming
      }
      status.textContent = 'Done.';
    } catch (err) {
      if (err.name === 'AbortError') status.textContent = 'Stopped.';
      else { status.textContent = ''; setAlert(chatErr, errText(err)); }
    } finally {
      chatCtl = null;
      output.removeAttribute('aria-busy');
      sendBtn.removeAttribute('aria-disabled');
      if (document.activeElement === stopBtn) sendBtn.focus();
      stopBtn.disabled = true;
    }
  });

  // --- image generation ---
  let imgCtl = null;
  signal.addEventListener('abort', () => imgCtl?.abort());
  imgForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (imgCtl) return;
    setAlert(imgErr, '');
    const key = requireKey(imgErr);
    if (!key) return;
    const model = imgModelSel.value;
    const prompt = imgPrompt.value.trim();
    if (!model) return setAlert(imgErr, 'No image model is available.');
    if (!prompt) { setAlert(imgErr, 'Describe the image first.'); imgPrompt.focus(); return; }
    imgCtl = new AbortController();
    genBtn.setAttribute('aria-disabled', 'true');
    imgStatus.textContent = 'Generating…';
    try {
      const res = await callV1('/v1/images/generations', key,
        { model, prompt, n: 1, size: '256x256', response_format: 'b64_json' }, imgCtl.signal);
      const b64 = (await res.json())?.data?.[0]?.b64_json;
      if (typeof b64 !== 'string' || !b64) throw new ApiError('The server returned no image.');
      replace(imgBox, h('img', { id: 'pg-image', alt: `generated image for: ${prompt}`, src: `data:image/png;base64,${b64}`, width: 256, height: 256 }));
      imgStatus.textContent = 'Done.';
    } catch (err) {
      imgStatus.textContent = '';
      setAlert(imgErr, errText(err));
    } finally {
      imgCtl = null;
      genBtn.removeAttribute('aria-disabled');
    }
  });

  // --- model lists ---
  let all = [];
  try {
    all = (await api('/models', { signal }))?.data ?? [];
  } catch (err) {
    fillSelect(modelSel, [], 'Models could not be loaded');
    fillSelect(imgModelSel, [], 'Models could not be loaded');
    decisions.fill([], 'Models could not be loaded');
    rerank.fill([], 'Models could not be loaded');
    throw err;
  }
  fillSelect(modelSel, all.filter((m) => m.kind === 'chat'), 'No chat models installed');
  fillSelect(imgModelSel, all.filter((m) => m.kind === 'image'), 'No image models installed');
  decisions.fill(all);
  rerank.fill(all);
}
