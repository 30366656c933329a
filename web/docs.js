// Docs page: the manual (web/docs/*.md, embedded in the server) as the console shows it. The
// server sends each page as a tree of [tag, attributes, ...children] (src/1-api/console/markdown.ts),
// built here with h(): no HTML from the server is ever parsed. Routes: #/docs (the contents),
// #/docs/PAGE, #/docs/PAGE/ANCHOR (scrolled to that heading).
import { api } from './api.js';
import { h, put } from './dom.js';

// The tags and attributes the server's renderer writes; anything else is dropped here too.
const TAGS = new Set(['h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'p', 'ul', 'ol', 'li', 'a', 'code', 'pre', 'em', 'strong', 's', 'blockquote', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'hr', 'br', 'span']);
const ATTRS = new Set(['id', 'class', 'title', 'target', 'rel', 'start']);
const safeHref = (v) => /^(#\/docs\/|https?:|mailto:)/.test(v);

function build(node) {
  if (typeof node === 'string') return node;
  if (!Array.isArray(node)) return null;
  const [tag, attrs, ...children] = node;
  const kept = {};
  for (const [k, v] of Object.entries(attrs ?? {})) if (ATTRS.has(k) || (k === 'href' && safeHref(v))) kept[k] = String(v);
  return h(TAGS.has(tag) ? tag : 'span', kept, ...children.map(build));
}

/** "#/docs/configuration/models" -> { page: "configuration", anchor: "models" }. */
function place() {
  const [, page = 'index', ...rest] = location.hash.replace(/^#\//, '').split('/');
  return { page: decodeURIComponent(page || 'index'), anchor: decodeURIComponent(rest.join('/')) };
}

export async function render({ view, signal }) {
  const { page, anchor } = place();
  const nav = h('nav', { class: 'doc-nav', 'aria-label': 'Manual pages' });
  const body = h('article', { class: 'doc', id: 'doc', 'aria-busy': 'true' });
  put(view, h('div', { class: 'doc-layout' }, nav, body));
  const [list, doc] = await Promise.all([api('/docs', { signal }), api(`/docs/${encodeURIComponent(page)}`, { signal })]);
  if (signal.aborted) return;
  put(nav, h('ul', null, list.data.map((p) =>
    h('li', null, h('a', { href: `#/docs/${p.name}`, 'aria-current': p.name === doc.name ? 'page' : null, text: p.title })))));
  put(body, doc.tree.map(build));
  body.removeAttribute('aria-busy');
  if (anchor) document.getElementById(`doc-${anchor}`)?.scrollIntoView();
}
