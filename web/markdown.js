// Markdown for the console's chat: a model's answer rendered as DOM nodes. Model output is hostile
// input (a random-weights model writes anything), so the text is never parsed as HTML: every node
// is made with document.createElement / createTextNode, attributes come from a fixed list, raw HTML
// in the Markdown is shown as the literal text it is, links go only to http:, https: and mailto:,
// and images are never loaded (a link to them, or their alt text). The parser is one pass over the
// lines and one over each paragraph's characters; nesting (quotes, lists, emphasis, brackets) is
// capped, so 200 KB of input or 10,000 nested markers render in linear-ish time. The chat page
// re-renders a message's whole text as a stream arrives: an unclosed code fence is a code block to
// the end, and any prefix of a document renders.
//
//   renderMarkdown(text, { breaks = true, headingOffset = 2 }) -> DocumentFragment
//   safeUrl(url) -> the normalized http:/https:/mailto: URL, or null
//
// Append the fragment into an element with class "md" (web/markdown.css styles .md and the md-*
// classes written here). breaks: a single newline inside a paragraph is a line break (as chat UIs
// do); headingOffset: "# Title" becomes <h3 class="md-h1"> (the page's own h1/h2 stay the outline's
// top; the look follows the Markdown level).
//
// The parsing lives beside this file: web/markdown-blocks.js (lines into blocks) and
// web/markdown-inline.js (a block's text into inline nodes). This file turns their tree into DOM.
import { highlight, languageOf } from './highlight.js';
import { parseBlocks } from './markdown-blocks.js';
import { parseInline, plainText } from './markdown-inline.js';

const MAX_INLINE_DEPTH = 20; // emphasis/links nested deeper: their text without the formatting
const MAX_HIGHLIGHT = 200_000; // characters of one code block highlighted; a longer block is plain text

/** The Markdown `text` as a fragment of safe DOM nodes. */
export function renderMarkdown(text, opts) {
  opts = opts ?? {};
  const ctx = { breaks: opts.breaks !== false, headingOffset: clampInt(opts.headingOffset, 0, 5, 2) };
  const src = String(text ?? '').replace(/\0/g, '\uFFFD');
  const frag = document.createDocumentFragment();
  renderBlocks(parseBlocks(src.split(/\r\n|\r|\n/), 0), frag, ctx, false);
  return frag;
}

/** The href a link may have: an http:, https: or mailto: URL, normalized; null for anything else. */
export function safeUrl(raw) {
  // Browsers drop leading/trailing controls and spaces and every tab/newline inside a URL.
  let s = String(raw ?? '').replace(/[\t\n\r]/g, '');
  let a = 0;
  let b = s.length;
  while (a < b && (s.charCodeAt(a) <= 32 || s.charCodeAt(a) === 127)) a++;
  while (b > a && (s.charCodeAt(b - 1) <= 32 || s.charCodeAt(b - 1) === 127)) b--;
  s = s.slice(a, b);
  if (!/^(?:https?|mailto):/i.test(s)) return null;
  let url;
  try { url = new URL(s); } catch { return null; }
  if (url.protocol !== 'http:' && url.protocol !== 'https:' && url.protocol !== 'mailto:') return null;
  if (url.protocol !== 'mailto:' && !url.hostname) return null;
  return url.href;
}

function clampInt(v, lo, hi, dflt) {
  const n = Number(v);
  return Number.isInteger(n) ? Math.min(hi, Math.max(lo, n)) : dflt;
}

// ---------------------------------------------------------------------------------------------
// DOM. Only these elements and attributes are ever written.

function el(tag, attrs) {
  const e = document.createElement(tag);
  if (attrs) for (const k in attrs) if (attrs[k] != null && attrs[k] !== '') e.setAttribute(k, String(attrs[k]));
  return e;
}
const text = (parent, s) => { if (s) parent.appendChild(document.createTextNode(s)); };

function linkEl(href, title) {
  return el('a', { href, title: title || null, target: '_blank', rel: 'noopener noreferrer nofollow' });
}

/** Inline nodes into `parent`, iteratively (nesting can be deep); links inside links are text. */
function renderInline(source, parent, ctx) {
  const stack = [{ nodes: parseInline(source), at: 0, el: parent, depth: 0, inLink: false }];
  while (stack.length) {
    const f = stack[stack.length - 1];
    if (f.at >= f.nodes.length) { stack.pop(); continue; }
    const nd = f.nodes[f.at++];
    switch (nd.type) {
      case 'text': { // with the text nodes after it: one DOM node for "[" "a" "]" left as text
        let t = nd.text;
        while (f.at < f.nodes.length && f.nodes[f.at].type === 'text') t += f.nodes[f.at++].text;
        text(f.el, t);
        break;
      }
      case 'code': { const c = el('code', { class: 'md-inline-code' }); c.textContent = nd.text; f.el.appendChild(c); break; }
      case 'br': f.el.appendChild(el('br')); break;
      case 'soft': if (ctx.breaks) f.el.appendChild(el('br')); else text(f.el, '\n'); break;
      case 'image': {
        const alt = plainText(nd.children);
        const href = safeUrl(nd.dest);
        if (href && !f.inLink) {
          const a = linkEl(href, nd.title || 'Image (not loaded)');
          a.className = 'md-image';
          a.textContent = alt || 'image';
          f.el.appendChild(a);
        } else text(f.el, alt);
        break;
      }
      case 'link': {
        const href = safeUrl(nd.dest);
        if (href && !f.inLink && f.depth < MAX_INLINE_DEPTH) {
          const a = linkEl(href, nd.title);
          f.el.appendChild(a);
          stack.push({ nodes: nd.children, at: 0, el: a, depth: f.depth + 1, inLink: true });
        } else stack.push({ nodes: nd.children, at: 0, el: f.el, depth: f.depth, inLink: f.inLink });
        break;
      }
      default: { // em, strong, del
        if (f.depth < MAX_INLINE_DEPTH) {
          const e = el(nd.type);
          f.el.appendChild(e);
          stack.push({ nodes: nd.children, at: 0, el: e, depth: f.depth + 1, inLink: f.inLink });
        } else stack.push({ nodes: nd.children, at: 0, el: f.el, depth: f.depth, inLink: f.inLink });
      }
    }
  }
}

function renderBlocks(blocks, parent, ctx, tight) {
  for (const b of blocks) {
    switch (b.t) {
      case 'p': {
        if (tight) { renderInline(b.text, parent, ctx); break; }
        const p = el('p');
        renderInline(b.text, p, ctx);
        parent.appendChild(p);
        break;
      }
      case 'h': {
        const h = el(`h${Math.min(6, b.level + ctx.headingOffset)}`, { class: `md-h${b.level}` });
        renderInline(b.text, h, ctx);
        parent.appendChild(h);
        break;
      }
      case 'hr': parent.appendChild(el('hr')); break;
      case 'code': parent.appendChild(codeBlock(b.code, b.lang)); break;
      case 'quote': {
        const q = el('blockquote');
        renderBlocks(b.children, q, ctx, false);
        parent.appendChild(q);
        break;
      }
      case 'list': {
        const list = el(b.ordered ? 'ol' : 'ul', { start: b.ordered && b.start !== 1 ? b.start : null });
        for (const item of b.items) {
          const li = el('li', { class: item.task == null ? null : 'md-task' });
          if (item.task != null) {
            const box = el('span', { class: 'md-task-box' });
            box.textContent = item.task ? '☑ ' : '☐ ';
            li.appendChild(box);
          }
          // A tight item's first paragraph is inline text; what follows it goes on its own line.
          const kids = item.children;
          if (!b.loose && kids.length && kids[0].t === 'p') {
            renderInline(kids[0].text, li, ctx);
            renderBlocks(kids.slice(1), li, ctx, false);
          } else renderBlocks(kids, li, ctx, false);
          list.appendChild(li);
        }
        parent.appendChild(list);
        break;
      }
      case 'table': parent.appendChild(table(b, ctx)); break;
    }
  }
}

function table(b, ctx) {
  const wrap = el('div', { class: 'md-table-wrap', tabindex: '0' });
  const t = el('table');
  const alignClass = (k) => (b.align[k] ? `md-align-${b.align[k]}` : null);
  const thead = el('thead');
  const hr = el('tr');
  b.head.forEach((cell, k) => {
    const th = el('th', { scope: 'col', class: alignClass(k) });
    renderInline(cell, th, ctx);
    hr.appendChild(th);
  });
  thead.appendChild(hr);
  t.appendChild(thead);
  if (b.rows.length) {
    const tbody = el('tbody');
    for (const row of b.rows) {
      const tr = el('tr');
      row.forEach((cell, k) => {
        const td = el('td', { class: alignClass(k) });
        renderInline(cell, td, ctx);
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    }
    t.appendChild(tbody);
  }
  wrap.appendChild(t);
  return wrap;
}

/** A code block: its language and a Copy button above, the highlighted code in <pre><code>. */
function codeBlock(code, rawLang) {
  const label = /^[A-Za-z0-9_+#.\-]{1,32}$/.test(rawLang) ? rawLang.toLowerCase() : '';
  const lang = languageOf(label);
  const box = el('div', { class: 'md-code' });
  const head = el('div', { class: 'md-code-head' });
  const name = el('span', { class: 'md-code-lang' });
  name.textContent = label || 'text';
  const button = el('button', { type: 'button', class: 'md-copy', 'aria-label': 'Copy code' });
  button.textContent = 'Copy';
  const live = el('span', { class: 'md-sr-only', 'aria-live': 'polite' });
  let timer = 0;
  button.addEventListener('click', async () => {
    const ok = await copyText(code, button);
    button.textContent = ok ? 'Copied' : 'Copy failed';
    live.textContent = ok ? 'Copied' : 'Copy failed';
    clearTimeout(timer);
    timer = setTimeout(() => { button.textContent = 'Copy'; live.textContent = ''; }, 2000);
  });
  head.appendChild(name);
  head.appendChild(live);
  head.appendChild(button);
  const pre = el('pre', { class: 'md-pre', tabindex: '0' });
  const body = el('code', { class: lang ? `md-code-body md-lang-${lang}` : 'md-code-body' });
  if (lang && code.length <= MAX_HIGHLIGHT) {
    try { body.appendChild(highlight(code, lang)); } catch { body.textContent = code; }
  } else body.textContent = code;
  pre.appendChild(body);
  box.appendChild(head);
  box.appendChild(pre);
  return box;
}

/** Puts `text` on the clipboard: the Clipboard API, else a selected textarea and execCommand. */
async function copyText(value, button) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(value);
      return true;
    }
  } catch {
    // fall through to the textarea
  }
  const area = el('textarea', { class: 'md-copy-buffer', readonly: 'readonly', 'aria-hidden': 'true', tabindex: '-1' });
  area.value = value;
  document.body.appendChild(area);
  let ok = false;
  try {
    area.select();
    area.setSelectionRange(0, value.length);
    ok = document.execCommand('copy');
  } catch {
    ok = false;
  }
  area.remove();
  button.focus();
  return ok;
}
