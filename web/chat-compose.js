// The chat page's controls: the model picker (grouped by kind), the settings (system prompt,
// temperature, max tokens, tools; an image model's size, n, seed, steps) and the composer (the
// message box, up to two attached images, Send and Stop, the keyboard: Enter sends, Shift+Enter
// is a new line, Esc stops).
import { h, put, replace, setAlert } from './dom.js';

/** What chat requests accept (the contract: PNG, JPEG, WebP, GIF; at most 2 a request). */
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp', 'image/gif'];
export const MAX_IMAGES = 2;
/** What a conversation keeps of one image (the conversations API's bound; the chat API's is 20 MiB). */
export const MAX_IMAGE_BYTES = 8 * 1024 * 1024;
/** The kinds a conversation can use, in the picker's order. */
const KINDS = [['chat', 'Chat models'], ['image', 'Image models']];
export const IMAGE_SIZES = ['256x256', '512x512', '768x768', '1024x1024'];

/** A model picker: one <optgroup> per kind; a vision model says so. */
export function modelPicker() {
  const select = h('select', { id: 'chat-model' }, h('option', { value: '', text: 'Loading models…' }));
  const note = h('p', { class: 'muted small', id: 'chat-model-note' });
  const field = h('div', { class: 'field chat-model' }, h('label', { for: 'chat-model', text: 'Model' }), select, note);
  let byId = new Map();
  return {
    field, select,
    /** Fills the picker from the console's model list (on a cluster one model may be listed by several nodes). */
    fill(models) {
      byId = new Map();
      for (const m of models) if (typeof m?.id === 'string' && !byId.has(m.id)) byId.set(m.id, m);
      replace(select);
      let any = false;
      for (const [kind, label] of KINDS) {
        const ms = [...byId.values()].filter((m) => m.kind === kind);
        if (!ms.length) continue;
        any = true;
        put(select, h('optgroup', { label }, ms.map((m) => h('option', {
          value: m.id,
          text: `${m.name && m.name !== m.id ? `${m.name} (${m.id})` : m.id}${m.supports_vision ? ' · sees images' : ''}`,
        }))));
      }
      if (!any) put(select, h('option', { value: '', text: 'No chat or image models are installed' }));
      const others = [...byId.values()].filter((m) => !KINDS.some(([k]) => k === m.kind)).length;
      note.textContent = others ? 'Embedding, classifier and reranker models are in the Playground.' : '';
    },
    /** The model chosen (with its kind and vision), or null. */
    current() { return byId.get(select.value) ?? null; },
    has(id) { return byId.has(id); },
    set(id) { if (id && byId.has(id)) select.value = id; },
  };
}

const numberIn = (id, attrs) => h('input', { id, type: 'number', inputmode: 'decimal', ...attrs });

/** The settings a conversation keeps: chat's and an image model's. */
export function settingsPanel() {
  const system = h('textarea', { id: 'chat-system', rows: 3, 'aria-describedby': 'chat-system-help' });
  const temperature = numberIn('chat-temperature', { min: 0, max: 2, step: 0.1, placeholder: 'default' });
  const maxTokens = numberIn('chat-max-tokens', { min: 1, step: 1, placeholder: 'default' });
  const tools = h('textarea', { id: 'chat-tools', rows: 3, class: 'mono', spellcheck: 'false', 'aria-describedby': 'chat-tools-help' });
  const size = h('select', { id: 'img-size' }, h('option', { value: '', text: 'Model default' }), IMAGE_SIZES.map((s) => h('option', { value: s, text: s.replace('x', ' × ') })));
  const n = numberIn('img-n', { min: 1, max: 4, step: 1, placeholder: '1' });
  const seed = numberIn('img-seed', { min: 0, step: 1, placeholder: 'random' });
  const steps = numberIn('img-steps', { min: 1, max: 50, step: 1, placeholder: 'default' });
  const field = (id, label, input, help) => h('div', { class: 'field' }, h('label', { for: id, text: label }), input, help ? h('p', { class: 'muted small', id: `${id}-help`, text: help }) : null);
  const chatPart = h('div', { class: 'settings-chat' },
    field('chat-system', 'System prompt', system, 'Sent first in every request of this conversation.'),
    h('div', { class: 'settings-row' }, field('chat-temperature', 'Temperature', temperature), field('chat-max-tokens', 'Max tokens', maxTokens)),
    field('chat-tools', 'Tools (JSON)', tools, 'Optional: an array of OpenAI function tools, e.g. [{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}]. The model\'s tool calls are shown; nothing runs them.'));
  const imagePart = h('div', { class: 'settings-image settings-row' },
    field('img-size', 'Size', size), field('img-n', 'Images', n), field('img-seed', 'Seed', seed), field('img-steps', 'Steps', steps));
  const errEl = h('div', { class: 'alert', role: 'alert', id: 'chat-settings-error', hidden: true });
  const details = h('details', { class: 'chat-settings', id: 'chat-settings' }, h('summary', { text: 'Settings' }), errEl, chatPart, imagePart);

  const num = (input) => (input.value.trim() === '' ? undefined : Number(input.value));
  return {
    el: details,
    /** Shows the part for a model of `kind` ("chat" or "image"). */
    show(kind) { chatPart.hidden = kind === 'image'; imagePart.hidden = kind !== 'image'; },
    set(s = {}) {
      system.value = s.system ?? '';
      temperature.value = s.temperature ?? '';
      maxTokens.value = s.max_tokens ?? '';
      tools.value = s.tools ?? '';
      size.value = s.image?.size ?? '';
      n.value = s.image?.n ?? '';
      seed.value = s.image?.seed ?? '';
      steps.value = s.image?.steps ?? '';
    },
    /** The settings, checked: {settings} or {error, input} (the field to fix, the panel opened). */
    read() {
      setAlert(errEl, '');
      const bad = (input, msg) => { details.open = true; setAlert(errEl, msg); input.focus(); return { error: msg }; };
      const t = num(temperature);
      if (t !== undefined && !(t >= 0 && t <= 2)) return bad(temperature, 'Temperature is a number from 0 to 2.');
      const mt = num(maxTokens);
      if (mt !== undefined && !(Number.isInteger(mt) && mt >= 1)) return bad(maxTokens, 'Max tokens is a whole number of 1 or more.');
      const toolsText = tools.value.trim();
      if (toolsText) {
        let parsed;
        try { parsed = JSON.parse(toolsText); } catch { return bad(tools, 'Tools must be valid JSON: an array of function tools.'); }
        if (!Array.isArray(parsed)) return bad(tools, 'Tools must be a JSON array of function tools.');
      }
      const image = {};
      if (size.value) image.size = size.value;
      const nv = num(n);
      if (nv !== undefined) { if (!(Number.isInteger(nv) && nv >= 1 && nv <= 4)) return bad(n, 'Images is a whole number from 1 to 4.'); image.n = nv; }
      const sv = num(seed);
      if (sv !== undefined) { if (!(Number.isInteger(sv) && sv >= 0 && sv <= 4294967295)) return bad(seed, 'Seed is a whole number from 0 to 4294967295.'); image.seed = sv; }
      const st = num(steps);
      if (st !== undefined) { if (!(Number.isInteger(st) && st >= 1 && st <= 50)) return bad(steps, 'Steps is a whole number from 1 to 50.'); image.steps = st; }
      const settings = {};
      if (system.value.trim()) settings.system = system.value;
      if (t !== undefined) settings.temperature = t;
      if (mt !== undefined) settings.max_tokens = mt;
      if (toolsText) settings.tools = toolsText;
      if (Object.keys(image).length) settings.image = image;
      return { settings };
    },
  };
}

/** A File → data URL. */
function dataUrlOf(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(r.error ?? new Error('the file could not be read'));
    r.readAsDataURL(file);
  });
}

/**
 * The message box with its attachments and buttons. `onSend({text, images})` starts a turn;
 * `onStop()` ends the one running. `busy(true|false)` switches Send and Stop.
 */
export function composer({ onSend, onStop, signal }) {
  const errEl = h('div', { class: 'alert', role: 'alert', id: 'chat-error', hidden: true });
  const input = h('textarea', { id: 'chat-input', rows: 3, 'aria-describedby': 'chat-input-help', placeholder: 'Write a message…' });
  const help = h('p', { id: 'chat-input-help', class: 'muted small', text: 'Enter sends, Shift+Enter starts a new line, Esc stops the answer.' });
  const file = h('input', { type: 'file', id: 'chat-file', accept: IMAGE_TYPES.join(','), multiple: true, class: 'sr-only', tabindex: -1, 'aria-hidden': 'true' });
  const attachBtn = h('button', { type: 'button', id: 'chat-attach', class: 'secondary', text: 'Attach image' });
  const sendBtn = h('button', { type: 'submit', id: 'chat-send', text: 'Send' });
  const stopBtn = h('button', { type: 'button', id: 'chat-stop', class: 'secondary', text: 'Stop', disabled: true });
  const thumbs = h('ul', { class: 'attachments', id: 'chat-attachments', 'aria-label': 'Attached images' });
  const form = h('form', { id: 'chat-form', class: 'chat-form', novalidate: true },
    errEl, thumbs,
    h('label', { for: 'chat-input', class: 'sr-only', text: 'Message' }), input, help, file,
    h('div', { class: 'buttons' }, attachBtn, sendBtn, stopBtn));

  let images = []; // data URLs
  let running = false;
  let visionOk = false;

  function drawThumbs() {
    replace(thumbs, images.map((url, i) => h('li', null,
      h('img', { src: url, alt: `attached image ${i + 1}`, width: 64, height: 64 }),
      h('button', { type: 'button', class: 'small secondary', 'aria-label': `Remove attached image ${i + 1}`, text: 'Remove', onclick: () => { images.splice(i, 1); drawThumbs(); input.focus(); } }))));
    thumbs.hidden = images.length === 0;
  }

  async function add(files) {
    setAlert(errEl, '');
    const list = [...files].filter((f) => f && typeof f.type === 'string');
    if (!list.length) return;
    if (!visionOk) return setAlert(errEl, 'The chosen model does not see images: pick a model marked “sees images”.');
    for (const f of list) {
      if (!IMAGE_TYPES.includes(f.type)) return setAlert(errEl, `${f.name || 'That file'} is not a PNG, JPEG, WebP or GIF image.`);
      if (f.size > MAX_IMAGE_BYTES) return setAlert(errEl, `${f.name || 'That image'} is larger than 8 MB.`);
      if (images.length >= MAX_IMAGES) return setAlert(errEl, `At most ${MAX_IMAGES} images go with one message.`);
      try { images.push(await dataUrlOf(f)); } catch (e) { return setAlert(errEl, `The image could not be read: ${e.message}`); }
    }
    drawThumbs();
  }

  attachBtn.addEventListener('click', () => file.click());
  file.addEventListener('change', async () => { await add(file.files ?? []); file.value = ''; });
  input.addEventListener('paste', (ev) => {
    const files = [...(ev.clipboardData?.files ?? [])];
    if (files.length) { ev.preventDefault(); add(files); }
  });
  form.addEventListener('dragover', (ev) => { if (ev.dataTransfer?.types?.includes('Files')) { ev.preventDefault(); form.classList.add('drop'); } });
  form.addEventListener('dragleave', () => form.classList.remove('drop'));
  form.addEventListener('drop', (ev) => {
    form.classList.remove('drop');
    if (!ev.dataTransfer?.files?.length) return;
    ev.preventDefault();
    add(ev.dataTransfer.files);
  });

  const send = () => {
    if (running) return;
    setAlert(errEl, '');
    const text = input.value.trim();
    if (!text) { setAlert(errEl, 'Write a message first.'); input.focus(); return; }
    onSend({ text, images: [...images] });
  };
  form.addEventListener('submit', (ev) => { ev.preventDefault(); send(); });
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); send(); }
  });
  stopBtn.addEventListener('click', () => onStop());
  // Esc stops an answer wherever focus is on the page (an open dialog of the browser's takes it first).
  const onKey = (ev) => { if (ev.key === 'Escape' && running) { ev.preventDefault(); onStop(); } };
  document.addEventListener('keydown', onKey);
  signal.addEventListener('abort', () => document.removeEventListener('keydown', onKey));
  drawThumbs();

  return {
    form, input,
    error: (msg) => setAlert(errEl, msg),
    /** The message was taken: the box and attachments are emptied. */
    clear() { input.value = ''; images = []; drawThumbs(); },
    /** Whether images can be attached (a vision model), and the attach button's label. */
    vision(ok, kind) {
      visionOk = ok;
      attachBtn.hidden = !ok;
      if (!ok && images.length) { images = []; drawThumbs(); }
      input.placeholder = kind === 'image' ? 'Describe the image…' : 'Write a message…';
    },
    busy(on) {
      running = on;
      if (on) sendBtn.setAttribute('aria-disabled', 'true'); else sendBtn.removeAttribute('aria-disabled');
      if (!on && document.activeElement === stopBtn) input.focus();
      stopBtn.disabled = !on;
    },
  };
}

