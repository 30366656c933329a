// Chat: conversations with the appliance's models, signed in as the account (issue 48). Requests
// go to /console/api/v1/… (the inference API as the signed-in account, through its console key:
// no key in the page; billed to the account); conversations are kept in the store per account
// (/console/api/conversations). Chat models stream (Stop ends the answer: only what was made is
// billed); image models generate into the same conversation. A turn is saved in two steps: the
// message when it is sent, the answer when it ends (stopped and failed ones too).
import { api, apiRaw, ApiError } from './api.js';
import { h, put, replace, setAlert, errText } from './dom.js';
import { readSSE } from './sse.js';
import { composer, modelPicker, settingsPanel, MAX_IMAGES } from './chat-compose.js';
import { editForm, fillAnswer, messageView, usageText } from './chat-messages.js';
import { conversationList } from './chat-list.js';

const TITLE_CHARS = 60;
/** How long the page looks for an answer's settled cost (the meter settles as the answer ends). */
const COST_TRIES = 15;
const COST_WAIT_MS = 200;

const idFromHash = () => (/^#\/chat\/(conv_[\w-]+)/.exec(location.hash) || [])[1] || null;
const titleOf = (text) => {
  const line = text.split('\n').find((l) => l.trim())?.trim() ?? 'New conversation';
  return line.length > TITLE_CHARS ? `${line.slice(0, TITLE_CHARS - 1)}…` : line;
};

/**
 * The conversation as chat-completions messages: the system prompt, then each turn (images as
 * image_url parts). A request carries at most MAX_IMAGES images (the contract): the latest ones
 * go; an earlier one is named in its message's text instead.
 */
export function toApiMessages(settings, messages) {
  const out = [];
  if (settings?.system?.trim()) out.push({ role: 'system', content: settings.system });
  let room = MAX_IMAGES;
  const sent = new Map(); // message → its images that go (the latest first)
  for (const m of [...messages].reverse()) {
    if (m.role !== 'user' || !m.images?.length) continue;
    const take = Math.min(room, m.images.length);
    sent.set(m, m.images.slice(m.images.length - take));
    room -= take;
  }
  for (const m of messages) {
    if (m.role === 'user') {
      const images = sent.get(m) ?? [];
      const left = (m.images?.length ?? 0) - images.length;
      const text = left ? `${m.content}\n\n(${left === 1 ? 'an image was' : `${left} images were`} attached here)` : m.content;
      out.push(images.length
        ? { role: 'user', content: [{ type: 'text', text }, ...images.map((url) => ({ type: 'image_url', image_url: { url } }))] }
        : { role: 'user', content: text });
    } else if (m.role === 'assistant') {
      // Generated images and failed answers are not sent back; a tool call is told as text (no tool ran).
      let text = m.content || '';
      if (!text && m.tool_calls?.length) text = m.tool_calls.map((c) => `[called ${c.name} with ${c.arguments}]`).join('\n');
      if (text) out.push({ role: 'assistant', content: text });
    }
  }
  return out;
}

export async function render({ view, signal }) {
  let conv = null; // {id, title, model, settings, messages}
  let turn = null; // the AbortController of the running turn
  let editing = null; // the seq of the message being edited
  let working = false; // an action of the page is running (one at a time)

  const picker = modelPicker();
  const settings = settingsPanel();
  const title = h('h2', { id: 'chat-title', class: 'chat-title', text: 'New conversation' });
  const log = h('div', { id: 'chat-log', class: 'chat-log', role: 'log', 'aria-label': 'Messages' });
  const status = h('p', { id: 'chat-status', class: 'muted small', role: 'status' });
  const compose = composer({ signal, onSend: (m) => run(() => send(m)), onStop: () => turn?.abort() });
  const list = conversationList({
    signal,
    onOpen: (id) => run(() => open(id)),
    onNew: () => { if (!working) startNew(); },
    onRenamed: (c) => { if (conv?.id === c.id) { conv.title = c.title; title.textContent = c.title; } },
    onDeleted: (id) => { if (conv?.id === id) startNew(); },
  });
  const side = h('details', { class: 'chat-side-wrap', open: true }, h('summary', { text: 'Conversations' }), list.el);
  const wide = matchMedia('(min-width: 900px)');
  side.open = wide.matches;
  const main = h('section', { class: 'chat-main', 'aria-labelledby': 'chat-title' },
    h('div', { class: 'chat-head' }, title, picker.field), settings.el, log, status, compose.form);
  put(view, h('div', { class: 'chat-layout' }, side, main));

  signal.addEventListener('abort', () => turn?.abort());
  const onModel = () => {
    const m = picker.current();
    settings.show(m?.kind ?? 'chat');
    compose.vision(Boolean(m?.supports_vision), m?.kind);
  };
  picker.select.addEventListener('change', onModel);

  /** Runs one action of the page at a time; its error is shown above the message box. */
  async function run(fn) {
    if (working) return;
    working = true;
    try { await fn(); } catch (err) { if (!signal.aborted) compose.error(errText(err)); } finally { working = false; }
  }

  function drawMessages() {
    const msgs = conv?.messages ?? [];
    const lastAnswer = msgs.length && msgs[msgs.length - 1].role === 'assistant' ? msgs.length - 1 : -1;
    replace(log, msgs.map((m, seq) => {
      if (seq === editing) {
        const { form, area } = editForm(m, seq, { onSave: (text) => run(() => resend(seq, text)), onCancel: () => { editing = null; drawMessages(); focusMessage(seq); } });
        queueMicrotask(() => area.focus());
        return h('article', { class: 'msg msg-user editing', 'data-seq': seq, 'aria-label': `Editing message ${seq + 1}` }, form);
      }
      const actions = turn ? {} : m.role === 'user' ? { edit: (s) => { editing = s; drawMessages(); } } : seq === lastAnswer ? { regenerate: (s) => run(() => regenerate(s)) } : {};
      return messageView(m, { seq, actions, prompt: promptBefore(seq) });
    }));
    if (!msgs.length) put(log, h('p', { class: 'muted chat-empty', text: 'Pick a model and write a message to start. Conversations are kept with your account.' }));
  }
  const promptBefore = (seq) => conv?.messages.slice(0, seq).reverse().find((m) => m.role === 'user')?.content ?? '';
  const focusMessage = (seq) => log.querySelector(`[data-seq="${seq}"] [data-action]`)?.focus();

  function startNew() {
    conv = null;
    editing = null;
    title.textContent = 'New conversation';
    settings.set({});
    history.replaceState(null, '', '#/chat');
    list.select(null);
    status.textContent = '';
    drawMessages();
    compose.input.focus();
  }

  async function open(id) {
    const c = await api(`/conversations/${encodeURIComponent(id)}`, { signal });
    conv = { ...c, messages: c.messages ?? [] };
    editing = null;
    title.textContent = conv.title;
    settings.set(conv.settings ?? {});
    status.textContent = '';
    if (conv.model && picker.has(conv.model)) picker.set(conv.model);
    else if (conv.model) status.textContent = `This conversation used ${conv.model}, which is not served now; pick another model to go on.`;
    onModel();
    history.replaceState(null, '', `#/chat/${conv.id}`);
    list.select(conv.id);
    drawMessages();
  }

  /** Saves `messages` after the first `keep` of the conversation (the ones after are dropped: edit, regenerate). */
  // `count`: what the store held when this page last wrote or read it; another tab's write since is a 409, not lost.
  async function save(keep, messages) {
    const res = await api(`/conversations/${encodeURIComponent(conv.id)}/messages`, { body: { keep, count: conv.message_count ?? 0, messages } });
    conv.messages = conv.messages.slice(0, keep).concat(res?.messages ?? []);
    if (res?.conversation) Object.assign(conv, { updated_at: res.conversation.updated_at, message_count: res.conversation.message_count });
  }

  /** The model and settings to use, checked; the conversation created or updated with them. */
  async function prepare(firstText) {
    const model = picker.current();
    if (!model) throw new ApiError('Pick a model first.');
    const read = settings.read();
    if (read.error) return null;
    if (!conv) {
      const c = await api('/conversations', { body: { title: titleOf(firstText), model: model.id, settings: read.settings } });
      conv = { ...c, message_count: 0, messages: [] };
      title.textContent = conv.title;
      history.replaceState(null, '', `#/chat/${conv.id}`);
      list.select(conv.id);
    } else if (conv.model !== model.id || JSON.stringify(conv.settings ?? {}) !== JSON.stringify(read.settings)) {
      await api(`/conversations/${encodeURIComponent(conv.id)}`, { method: 'PATCH', body: { model: model.id, settings: read.settings } });
      conv.model = model.id;
      conv.settings = read.settings;
    }
    return { model, settings: read.settings };
  }

  async function send({ text, images }) {
    const model = picker.current();
    if (images.length && !model?.supports_vision) return compose.error('The chosen model does not see images.');
    const ready = await prepare(text);
    if (!ready) return;
    await save(conv.messages.length, [{ role: 'user', content: text, ...(images.length ? { images } : {}) }]);
    compose.clear();
    drawMessages();
    list.load().catch(() => {});
    await answer(ready);
  }

  async function resend(seq, text) {
    const old = conv.messages[seq];
    const ready = await prepare(text);
    if (!ready) return;
    editing = null;
    await save(seq, [{ role: 'user', content: text, ...(old.images?.length ? { images: old.images } : {}) }]);
    drawMessages();
    await answer(ready);
  }

  async function regenerate(seq) {
    const ready = await prepare('');
    if (!ready) return;
    conv.messages = conv.messages.slice(0, seq);
    drawMessages();
    await answer(ready, seq);
  }

  /** Makes the answer to the conversation as it is and saves it (after the first `keep` messages). */
  async function answer({ model, settings: s }, keep = conv.messages.length) {
    const msg = { role: 'assistant', content: '', model: model.id };
    const prompt = promptBefore(keep);
    const article = messageView(msg, { seq: keep, streaming: true, prompt });
    put(log, article);
    const body = article.querySelector('.msg-body');
    const meta = article.querySelector('.msg-meta');
    turn = new AbortController();
    compose.busy(true);
    log.setAttribute('aria-busy', 'true');
    status.textContent = model.kind === 'image' ? 'Generating…' : 'Waiting for the model…';
    article.scrollIntoView({ block: 'nearest' });
    let requestId = null;
    try {
      if (model.kind === 'image') requestId = await generate(model, s, msg, turn.signal);
      else requestId = await stream(model, s, msg, turn.signal, (id) => { requestId = id; }, () => fillAnswer(body, msg, { streaming: true, prompt }));
      status.textContent = 'Done.';
    } catch (err) {
      if (err?.name === 'AbortError') { msg.finish = 'stopped'; status.textContent = 'Stopped.'; }
      else { msg.finish = 'error'; msg.error = errText(err) || 'The request failed.'; status.textContent = ''; }
    } finally {
      turn = null;
    }
    if (requestId) msg.request_id = requestId;
    if (!msg.reasoning) delete msg.reasoning;
    if (!msg.tool_calls?.length) delete msg.tool_calls;
    fillAnswer(body, msg, { prompt });
    meta.textContent = usageText(msg);
    if (requestId) await settledCost(requestId, msg);
    meta.textContent = usageText(msg);
    try {
      await save(keep, [msg]);
    } catch (err) {
      compose.error(`The answer could not be saved: ${errText(err)}`);
    } finally {
      log.removeAttribute('aria-busy');
      compose.busy(false);
      drawMessages();
      list.load().catch(() => {});
    }
  }

  /** Streams a chat answer into `msg`; returns the request id. */
  async function stream(model, s, msg, sig, onId, draw) {
    const tools = s.tools ? JSON.parse(s.tools) : undefined;
    const res = await apiRaw('/v1/chat/completions', {
      model: model.id,
      messages: toApiMessages(s, conv.messages),
      stream: true,
      stream_options: { include_usage: true },
      // The reasoning comes back to be shown folded (llama-server's and vLLM's switch; web/docs/api-chat.md).
      reasoning_format: 'deepseek',
      ...(s.temperature !== undefined ? { temperature: s.temperature } : {}),
      ...(s.max_tokens !== undefined ? { max_tokens: s.max_tokens } : {}),
      ...(tools?.length ? { tools } : {}),
    }, sig);
    const id = res.headers.get('x-request-id');
    onId(id);
    status.textContent = 'Receiving…';
    const calls = [];
    let pending = false;
    const schedule = () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        const bottom = innerHeight + scrollY >= document.documentElement.scrollHeight - 120;
        draw();
        if (bottom) scrollTo(0, document.documentElement.scrollHeight);
      });
    };
    await readSSE(res.body, (obj) => {
      if (obj.error) throw new ApiError(obj.error.message || 'The answer ended with an error.', { code: obj.error.code });
      const choice = obj.choices?.[0];
      const d = choice?.delta;
      if (typeof d?.reasoning_content === 'string') msg.reasoning = (msg.reasoning ?? '') + d.reasoning_content;
      if (typeof d?.content === 'string') msg.content += d.content;
      for (const tc of Array.isArray(d?.tool_calls) ? d.tool_calls : []) {
        const i = Number.isInteger(tc.index) ? tc.index : calls.length;
        calls[i] ??= { id: '', name: '', arguments: '' };
        if (tc.id) calls[i].id = tc.id;
        if (tc.function?.name) calls[i].name += tc.function.name;
        if (typeof tc.function?.arguments === 'string') calls[i].arguments += tc.function.arguments;
        msg.tool_calls = calls.filter(Boolean).map(({ id: cid, ...c }) => (cid ? { id: cid, ...c } : c));
      }
      if (choice?.finish_reason) msg.finish = choice.finish_reason;
      if (obj.usage) {
        msg.usage = { input_tokens: obj.usage.prompt_tokens, output_tokens: obj.usage.completion_tokens };
        const cached = obj.usage.prompt_tokens_details?.cached_tokens;
        if (cached) msg.usage.cached_tokens = cached;
      }
      schedule();
    });
    return id;
  }

  /** Generates images into `msg`; returns the request id. */
  async function generate(model, s, msg, sig) {
    const prompt = [...conv.messages].reverse().find((m) => m.role === 'user')?.content ?? '';
    const params = { ...(s.image ?? {}) };
    const res = await apiRaw('/v1/images/generations', { model: model.id, prompt, response_format: 'b64_json', ...params }, sig);
    let out;
    try { out = await res.json(); } catch { throw new ApiError('The server sent a response that could not be read.'); }
    const data = Array.isArray(out?.data) ? out.data.filter((d) => typeof d?.b64_json === 'string' && d.b64_json) : [];
    if (!data.length) throw new ApiError('The server returned no image.');
    msg.images = data.map((d) => `data:image/png;base64,${d.b64_json}`);
    msg.image_params = { ...params, ...(Number.isInteger(data[0].seed) ? { seed: data[0].seed } : {}) };
    msg.finish = 'stop';
    return res.headers.get('x-request-id');
  }

  /** The answer's usage and cost as the meter settled them (a stopped answer's too: what was made). */
  async function settledCost(id, msg) {
    for (let i = 0; i < COST_TRIES && !signal.aborted; i++) {
      try {
        const u = await api(`/requests/${encodeURIComponent(id)}`, { signal });
        msg.usage = { input_tokens: u.input_tokens, output_tokens: u.output_tokens, ...(u.cached_tokens ? { cached_tokens: u.cached_tokens } : {}), cost_usd: u.cost_usd };
        return;
      } catch (err) {
        if (!(err instanceof ApiError) || err.status !== 404) return; // not settled (or failed before the meter): as the stream said
        await new Promise((r) => setTimeout(r, COST_WAIT_MS));
      }
    }
  }

  // --- first load ---
  drawMessages();
  const [models] = await Promise.all([
    api('/models', { signal }).then((r) => r?.data ?? []),
    list.load().catch((err) => { if (!signal.aborted) setAlert(list.el.querySelector('.alert'), errText(err)); }),
  ]);
  picker.fill(models);
  onModel();
  const id = idFromHash();
  if (id) await open(id);
  else compose.input.focus({ preventScroll: true });
}
