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
import { highlight, languageOf } from './highlight.js';

const MAX_BLOCK_DEPTH = 12; // quotes/lists nested deeper: their content is shown as text
const MAX_INLINE_DEPTH = 20; // emphasis/links nested deeper: their text without the formatting
const MAX_BRACKETS = 256; // unresolved "[" openers tracked at once; more are plain text
const MAX_TABLE_COLUMNS = 64;
const MAX_TABLE_PADDING = 4096; // empty cells one table adds to its short rows, at most
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
// Blocks. Each block is { t: 'p' | 'h' | 'hr' | 'code' | 'quote' | 'list' | 'table', ... }.

/** Columns of leading spaces/tabs (a tab to the next multiple of 4) and where the text starts. */
function lead(line) {
  let col = 0;
  let i = 0;
  for (; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (c === 32) col++;
    else if (c === 9) col += 4 - (col % 4);
    else break;
  }
  return { col, at: i };
}

/** The line without its first `n` columns of indentation (a tab that straddles leaves spaces). */
function stripCols(line, n) {
  let col = 0;
  let i = 0;
  while (i < line.length && col < n) {
    const c = line.charCodeAt(i);
    if (c === 32) { col++; i++; }
    else if (c === 9) {
      const w = 4 - (col % 4);
      if (col + w > n) return ' '.repeat(col + w - n) + line.slice(i + 1);
      col += w;
      i++;
    } else break;
  }
  return line.slice(i);
}

const isBlank = (line) => /^[ \t]*$/.test(line);

/** `s` without trailing spaces and tabs (a loop: /[ \t]+$/ backtracks quadratically on long runs). */
function trimEnd(s) {
  let e = s.length;
  while (e > 0 && (s.charCodeAt(e - 1) === 32 || s.charCodeAt(e - 1) === 9)) e--;
  return s.slice(0, e);
}

/** "```lang" / "~~~": { ch, len, info } for an opening fence (text after up to 3 spaces). */
function openFence(rest) {
  const c = rest.charCodeAt(0);
  if (c !== 96 && c !== 126) return null;
  let len = 0;
  while (rest.charCodeAt(len) === c) len++;
  if (len < 3) return null;
  const info = rest.slice(len).trim();
  if (c === 96 && info.includes('`')) return null;
  return { ch: c, len, info };
}

function closesFence(line, fence) {
  const { col, at } = lead(line);
  if (col > 3) return false;
  let k = at;
  while (line.charCodeAt(k) === fence.ch) k++;
  return k - at >= fence.len && isBlank(line.slice(k));
}

function atxLevel(rest) {
  let k = 0;
  while (k < 7 && rest.charCodeAt(k) === 35) k++;
  if (k === 0 || k > 6) return 0;
  const c = rest.charCodeAt(k);
  return Number.isNaN(c) || c === 32 || c === 9 ? k : 0;
}

function atxText(rest, level) {
  let s = rest.slice(level).trim();
  // A closing run of #s, when a space precedes it (or it is all there is).
  let k = s.length;
  while (k > 0 && s.charCodeAt(k - 1) === 35) k--;
  if (k < s.length && (k === 0 || s[k - 1] === ' ' || s[k - 1] === '\t')) s = s.slice(0, k).trim();
  return s;
}

/** Three or more of one of * - _ and nothing else but spaces. */
function isHr(rest) {
  const c = rest.charCodeAt(0);
  if (c !== 42 && c !== 45 && c !== 95) return false;
  let n = 0;
  for (let i = 0; i < rest.length; i++) {
    const d = rest.charCodeAt(i);
    if (d === c) n++;
    else if (d !== 32 && d !== 9) return false;
  }
  return n >= 3;
}

/** A list item's marker: { col, ordered, ch, num, contentCol, content } or null. */
function listMarker(line) {
  const { col, at } = lead(line);
  if (col > 3 || at === line.length) return null;
  const rest = line.slice(at);
  let ordered = false;
  let ch;
  let num = 1;
  let w;
  const c = rest.charCodeAt(0);
  if (c === 42 || c === 43 || c === 45) { ch = rest[0]; w = 1; }
  else {
    const m = /^(\d{1,9})([.)])/.exec(rest);
    if (!m) return null;
    ordered = true;
    ch = m[2];
    num = Number(m[1]);
    w = m[0].length;
  }
  const after = rest.slice(w);
  const a = after.charCodeAt(0);
  if (!Number.isNaN(a) && a !== 32 && a !== 9) return null;
  const sp = lead(after);
  if (sp.at === after.length) return { col, ordered, ch, num, contentCol: col + w + 1, content: '' };
  if (sp.col > 4) return { col, ordered, ch, num, contentCol: col + w + 1, content: stripCols(after, 1) };
  return { col, ordered, ch, num, contentCol: col + w + sp.col, content: after.slice(sp.at) };
}

/** Whether a line (not blank, indented under 4) starts a block that ends a paragraph. */
function interrupts(line) {
  const { col, at } = lead(line);
  if (col > 3 || at === line.length) return false;
  const rest = line.slice(at);
  if (openFence(rest) || atxLevel(rest) || isHr(rest) || rest.charCodeAt(0) === 62) return true;
  const m = listMarker(line);
  return !!m && m.content !== '' && (!m.ordered || m.num === 1);
}

/** The cells of a table row: split on "|" not escaped, outer pipes dropped. */
function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let cur = '';
  let from = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 92 && s.charCodeAt(i + 1) === 124) { cur += s.slice(from, i) + '|'; i++; from = i + 1; }
    else if (c === 124) {
      cells.push((cur + s.slice(from, i)).trim());
      cur = '';
      from = i + 1;
      if (cells.length > MAX_TABLE_COLUMNS) return cells;
    }
  }
  cells.push((cur + s.slice(from)).trim());
  return cells;
}

/** The alignments of a delimiter row ("| :-- | --: |"), or null when the line is not one. */
function delimiterRow(line) {
  if (!line.includes('|')) return null;
  const cells = splitRow(line);
  if (cells.length > MAX_TABLE_COLUMNS) return null;
  const align = [];
  for (const cell of cells) {
    if (!/^:?-+:?$/.test(cell)) return null;
    const l = cell.startsWith(':');
    const r = cell.endsWith(':');
    align.push(l && r ? 'center' : r ? 'right' : l ? 'left' : '');
  }
  return align;
}

/** A table starting at lines[i] (header, delimiter row): its alignments, or null. */
function tableAt(lines, i) {
  if (i + 1 >= lines.length) return null;
  const line = lines[i];
  if (!line.includes('|') || lead(line).col > 3) return null;
  const align = delimiterRow(lines[i + 1]);
  if (!align || lead(lines[i + 1]).col > 3) return null;
  return splitRow(line).length === align.length ? align : null;
}

function parseBlocks(lines, depth) {
  const out = [];
  const n = lines.length;
  let i = 0;
  while (i < n) {
    const line = lines[i];
    const { col, at } = lead(line);
    if (at === line.length) { i++; continue; }

    if (col >= 4) { // indented code
      const body = [];
      let j = i;
      for (; j < n; j++) {
        const l = lines[j];
        const L = lead(l);
        if (L.at === l.length) body.push(stripCols(l, 4));
        else if (L.col >= 4) body.push(stripCols(l, 4));
        else break;
      }
      while (body.length && isBlank(body[body.length - 1])) body.pop();
      out.push({ t: 'code', lang: '', code: body.join('\n') });
      i = j;
      continue;
    }

    const rest = line.slice(at);
    const fence = openFence(rest);
    if (fence) {
      const body = [];
      let j = i + 1;
      let closed = false;
      for (; j < n; j++) {
        if (closesFence(lines[j], fence)) { closed = true; j++; break; }
        body.push(stripCols(lines[j], col));
      }
      out.push({ t: 'code', lang: fence.info.split(/[ \t{]/, 1)[0] ?? '', code: body.join('\n'), open: !closed });
      i = j;
      continue;
    }

    const level = atxLevel(rest);
    if (level) { out.push({ t: 'h', level, text: atxText(rest, level) }); i++; continue; }
    if (isHr(rest)) { out.push({ t: 'hr' }); i++; continue; }

    if (rest.charCodeAt(0) === 62) { // > blockquote
      const inner = [];
      let j = i;
      for (; j < n; j++) {
        const l = lines[j];
        const L = lead(l);
        if (L.at < l.length && L.col < 4 && l.charCodeAt(L.at) === 62) {
          let r = l.slice(L.at + 1);
          if (r[0] === ' ' || r[0] === '\t') r = r.slice(1);
          inner.push(r);
        } else if (L.at < l.length && inner.length && !isBlank(inner[inner.length - 1]) && !interrupts(l) && !listMarker(l)) {
          inner.push(l.slice(L.at)); // a lazy continuation of the quote's paragraph
        } else break;
      }
      out.push({ t: 'quote', children: depth + 1 >= MAX_BLOCK_DEPTH ? [{ t: 'p', text: inner.join('\n') }] : parseBlocks(inner, depth + 1) });
      i = j;
      continue;
    }

    const first = listMarker(line);
    if (first) { i = parseList(lines, i, first, depth, out); continue; }

    const align = tableAt(lines, i);
    if (align) { i = parseTable(lines, i, align, out); continue; }

    // A paragraph, or a setext heading when "===" / "---" underlines it.
    const para = [rest];
    let j = i + 1;
    let setext = 0;
    for (; j < n; j++) {
      const l = lines[j];
      const L = lead(l);
      if (L.at === l.length) break;
      if (L.col < 4) {
        const r = l.slice(L.at);
        if (/^=+[ \t]*$/.test(r)) { setext = 1; j++; break; }
        // "---" under a paragraph is an h2; a lone "-" is not (CommonMark's one-dash underline
        // would flash a heading each time a stream's "- item" has only its dash so far).
        if (/^--+[ \t]*$/.test(r)) { setext = 2; j++; break; }
        if (interrupts(l) || tableAt(lines, j)) break;
      }
      para.push(l.slice(L.at));
    }
    const text = trimEnd(para.join('\n'));
    out.push(setext ? { t: 'h', level: setext, text } : { t: 'p', text });
    i = j;
  }
  return out;
}

function parseList(lines, i, first, depth, out) {
  const n = lines.length;
  const list = { t: 'list', ordered: first.ordered, start: first.num, items: [], loose: false };
  let j = i;
  let blankBefore = false;
  while (j < n) {
    const m = listMarker(lines[j]);
    if (!m || m.ordered !== first.ordered || m.ch !== first.ch) break;
    if (blankBefore) list.loose = true;
    const body = [m.content];
    j++;
    let blanks = 0;
    for (; j < n; j++) {
      const l = lines[j];
      const L = lead(l);
      if (L.at === l.length) { body.push(''); blanks++; continue; }
      if (L.col >= m.contentCol) body.push(stripCols(l, m.contentCol));
      else if (L.col >= m.col + 2) body.push(l.slice(L.at)); // under-indented, but deeper than the marker
      else if (!blanks && !isBlank(body[body.length - 1]) && !interrupts(l) && !listMarker(l) && !tableAt(lines, j)) body.push(l.slice(L.at)); // lazy
      else break;
      if (blanks) list.loose = list.loose || !isBlank(body[0]);
      blanks = 0;
    }
    while (body.length > 1 && isBlank(body[body.length - 1])) body.pop();
    blankBefore = blanks > 0;
    let task = null;
    const tm = /^\[([ xX])\](?=[ \t]|$)/.exec(body[0]);
    if (tm) { task = tm[1] !== ' '; body[0] = body[0].slice(3).replace(/^[ \t]+/, ''); }
    const children = depth + 1 >= MAX_BLOCK_DEPTH ? [{ t: 'p', text: body.join('\n') }] : parseBlocks(body, depth + 1);
    list.items.push({ task, children });
  }
  out.push(list);
  return j;
}

function parseTable(lines, i, align, out) {
  const head = splitRow(lines[i]);
  const rows = [];
  let j = i + 2;
  let pad = MAX_TABLE_PADDING; // empty cells added to short rows ("|x" under 64 columns is 63 of them)
  for (; j < lines.length; j++) {
    const l = lines[j];
    if (isBlank(l) || interrupts(l) || !l.includes('|')) break;
    const cells = splitRow(l).slice(0, head.length);
    while (cells.length < head.length && pad-- > 0) cells.push('');
    rows.push(cells);
  }
  out.push({ t: 'table', align, head, rows });
  return j;
}

// ---------------------------------------------------------------------------------------------
// Inlines: a doubly linked list of nodes while parsing; emphasis and links then wrap ranges of it
// into nodes with `children` arrays. The emphasis pass is CommonMark's delimiter algorithm (with
// its openers_bottom, so it stays linear).

const PUNCT = /[\p{P}\p{S}]/u;
const WS = /\s/;
const ASCII_PUNCT = /[!-\/:-@\[-`{-~]/;

const ENTITIES = {
  amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0', copy: '©', reg: '®', trade: '™',
  hellip: '…', mdash: '—', ndash: '–', lsquo: '‘', rsquo: '’', ldquo: '“', rdquo: '”', laquo: '«',
  raquo: '»', times: '×', divide: '÷', deg: '°', plusmn: '±', middot: '·', bull: '•', euro: '€',
  pound: '£', yen: '¥', cent: '¢', sect: '§', para: '¶', larr: '←', rarr: '→', uarr: '↑', darr: '↓',
  harr: '↔', le: '≤', ge: '≥', ne: '≠', minus: '−', micro: 'µ', frac12: '½', frac14: '¼', frac34: '¾',
};
const ENTITY = /&(?:#[xX]([0-9a-fA-F]{1,6})|#([0-9]{1,7})|([A-Za-z][A-Za-z0-9]{1,31}));/y;

/** The character(s) an entity at s[i] stands for and its length, or null (left as it is). */
function entityAt(s, i) {
  ENTITY.lastIndex = i;
  const m = ENTITY.exec(s);
  if (!m) return null;
  if (m[3]) return Object.hasOwn(ENTITIES, m[3]) ? { text: ENTITIES[m[3]], len: m[0].length } : null;
  const cp = m[1] ? parseInt(m[1], 16) : parseInt(m[2], 10);
  const ok = cp > 0 && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
  return { text: ok ? String.fromCodePoint(cp) : '\uFFFD', len: m[0].length };
}

/** Backslash escapes and entities of a link destination or title. */
function unescapeText(s) {
  let out = '';
  let from = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 92 && i + 1 < s.length && ASCII_PUNCT.test(s[i + 1])) { out += s.slice(from, i) + s[i + 1]; i++; from = i + 1; }
    else if (c === 38) {
      const e = entityAt(s, i);
      if (e) { out += s.slice(from, i) + e.text; i += e.len - 1; from = i + 1; }
    }
  }
  return out + s.slice(from);
}

/** After "](" at p: the destination, title and where the link ends; null when it is not a link. */
function linkTail(s, p) {
  const n = s.length;
  const skipWs = (q) => {
    let nl = 0;
    while (q < n) {
      const c = s.charCodeAt(q);
      if (c === 10) { if (++nl > 1) return -1; }
      else if (c !== 32 && c !== 9) break;
      q++;
    }
    return q;
  };
  p = skipWs(p);
  if (p < 0 || p >= n) return null;
  let dest;
  if (s.charCodeAt(p) === 41) return { dest: '', title: '', end: p + 1 };
  if (s.charCodeAt(p) === 60) { // <destination>
    let q = p + 1;
    for (; q < n; q++) {
      const c = s.charCodeAt(q);
      if (c === 92) q++;
      else if (c === 10 || c === 60) return null;
      else if (c === 62) break;
    }
    if (q >= n) return null;
    dest = s.slice(p + 1, q);
    p = q + 1;
  } else {
    let q = p;
    let depth = 0;
    for (; q < n; q++) {
      const c = s.charCodeAt(q);
      if (c === 92 && q + 1 < n && ASCII_PUNCT.test(s[q + 1])) q++;
      else if (c === 40) { if (++depth > 32) return null; }
      else if (c === 41) { if (depth === 0) break; depth--; }
      else if (c <= 32 || c === 127) break;
    }
    if (depth !== 0 || q === p) return null;
    dest = s.slice(p, q);
    p = q;
  }
  const afterDest = p;
  p = skipWs(p);
  if (p < 0 || p >= n) return null;
  let title = '';
  const t = s.charCodeAt(p);
  if (p > afterDest && (t === 34 || t === 39 || t === 40)) {
    const close = t === 40 ? 41 : t;
    let q = p + 1;
    let nl = 0;
    for (; q < n; q++) {
      const c = s.charCodeAt(q);
      if (c === 92) q++;
      else if (c === close) break;
      else if (t === 40 && c === 40) return null;
      else if (c === 10 && ++nl > 1) return null;
    }
    if (q >= n) return null;
    title = s.slice(p + 1, q);
    p = skipWs(q + 1);
    if (p < 0 || p >= n) return null;
  }
  if (s.charCodeAt(p) !== 41) return null;
  return { dest: unescapeText(dest), title: unescapeText(title), end: p + 1 };
}

const AUTOLINK = /<([A-Za-z][A-Za-z0-9+.\-]{1,31}:[^\s<>]*)>/y;
const EMAIL = /<([A-Za-z0-9.!#$%&'*+\/=?^_`{|}~\-]{1,64}@[A-Za-z0-9\-]{1,63}(?:\.[A-Za-z0-9\-]{1,63}){0,16})>/y;
const BARE = /https?:\/\/[^\s<]/iy;

/** The end of a bare URL starting at i (GFM's extended autolink: trailing punctuation left out). */
function bareUrlEnd(s, i) {
  let e = i;
  let open = 0;
  let close = 0;
  while (e < s.length) {
    const c = s.charCodeAt(e);
    if (c === 60 || WS.test(s[e])) break;
    if (c === 40) open++;
    else if (c === 41) close++;
    e++;
  }
  for (;;) {
    const last = s[e - 1];
    if ('?!.,:*_~\'"'.includes(last)) { e--; continue; }
    if (last === ')' && close > open) { e--; close--; continue; }
    if (last === ';') {
      const m = /&[A-Za-z0-9]{1,32};$/.exec(s.slice(Math.max(i, e - 40), e));
      if (m) { e -= m[0].length; continue; }
    }
    break;
  }
  return e;
}

// Characters that stop a run of plain text.
const SPECIAL = new Uint8Array(128);
for (const c of '\\`*_~[]!<&\nhH') SPECIAL[c.charCodeAt(0)] = 1;

function parseInline(s) {
  const n = s.length;
  const head = { type: 'head', prev: null, next: null };
  let tail = head;
  let delims = null; // top of the delimiter stack
  let brackets = null; // top of the bracket stack
  let nBrackets = 0;
  let buf = '';
  let runs = null; // backtick runs by length, found on first use

  const append = (node) => { node.prev = tail; node.next = null; tail.next = node; tail = node; return node; };
  const flush = () => { if (buf) { append({ type: 'text', text: buf }); buf = ''; } };
  const unlink = (node) => {
    if (node.prev) node.prev.next = node.next;
    if (node.next) node.next.prev = node.prev;
    else tail = node.prev;
    node.prev = node.next = null;
  };
  const removeDelim = (d) => {
    if (d.prev) d.prev.next = d.next;
    if (d.next) d.next.prev = d.prev;
    else delims = d.prev;
  };

  function closerOfLength(len, after) {
    if (!runs) {
      runs = new Map();
      for (let k = 0; k < n; k++) {
        if (s.charCodeAt(k) !== 96) continue;
        let e = k;
        while (s.charCodeAt(e) === 96) e++;
        let r = runs.get(e - k);
        if (!r) runs.set(e - k, (r = { at: [], ptr: 0 }));
        r.at.push(k);
        k = e - 1;
      }
    }
    const r = runs.get(len);
    if (!r) return -1;
    while (r.ptr < r.at.length && r.at[r.ptr] <= after) r.ptr++;
    return r.ptr < r.at.length ? r.at[r.ptr] : -1;
  }

  function processEmphasis(bottom) {
    if (delims === bottom) return;
    const openersBottom = new Map();
    let closer = delims;
    while (closer && closer.prev !== bottom) closer = closer.prev;
    while (closer) {
      if (!closer.canClose) { closer = closer.next; continue; }
      const key = closer.cc + (closer.canOpen ? '1' : '0') + (closer.orig % 3);
      const floor = openersBottom.has(key) ? openersBottom.get(key) : bottom;
      let opener = closer.prev;
      let found = false;
      while (opener && opener !== bottom && opener !== floor) {
        const odd = closer.cc !== '~' && (closer.canOpen || opener.canClose) && closer.orig % 3 !== 0 && (opener.orig + closer.orig) % 3 === 0;
        if (opener.cc === closer.cc && opener.canOpen && !odd) { found = true; break; }
        opener = opener.prev;
      }
      const old = closer;
      if (found) {
        const use = closer.cc === '~' ? 2 : closer.count >= 2 && opener.count >= 2 ? 2 : 1;
        opener.count -= use;
        closer.count -= use;
        opener.node.text = opener.node.text.slice(0, opener.count);
        closer.node.text = closer.node.text.slice(0, closer.count);
        const wrap = { type: closer.cc === '~' ? 'del' : use === 1 ? 'em' : 'strong', children: [] };
        for (let k = opener.node.next; k && k !== closer.node;) {
          const nx = k.next;
          k.prev = k.next = null;
          wrap.children.push(k);
          k = nx;
        }
        opener.node.next = wrap;
        wrap.prev = opener.node;
        wrap.next = closer.node;
        closer.node.prev = wrap;
        // Delimiters between them are gone.
        opener.next = closer;
        closer.prev = opener;
        if (opener.count === 0) { unlink(opener.node); removeDelim(opener); }
        if (closer.count === 0) {
          unlink(closer.node);
          const nx = closer.next;
          removeDelim(closer);
          closer = nx;
        }
      } else {
        closer = closer.next;
        openersBottom.set(key, old.prev);
        if (!old.canOpen) removeDelim(old);
      }
    }
    while (delims && delims !== bottom) removeDelim(delims);
  }

  let i = 0;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c >= 128 || !SPECIAL[c]) {
      let j = i + 1;
      while (j < n) {
        const d = s.charCodeAt(j);
        if (d < 128 && SPECIAL[d]) break;
        j++;
      }
      buf += s.slice(i, j);
      i = j;
      continue;
    }
    switch (c) {
      case 92: { // backslash
        const d = s[i + 1];
        if (d === '\n') { hardBreak(); i += 2; continue; }
        if (d !== undefined && ASCII_PUNCT.test(d)) { buf += d; i += 2; continue; }
        buf += '\\';
        i++;
        continue;
      }
      case 96: { // `code`
        let e = i;
        while (s.charCodeAt(e) === 96) e++;
        const len = e - i;
        const close = closerOfLength(len, i);
        if (close < 0) { buf += s.slice(i, e); i = e; continue; }
        let code = s.slice(e, close).replace(/\n/g, ' ');
        if (code.length > 2 && code[0] === ' ' && code[code.length - 1] === ' ' && code.trim() !== '') code = code.slice(1, -1);
        flush();
        append({ type: 'code', text: code });
        i = close + len;
        continue;
      }
      case 42: case 95: case 126: { // * _ ~
        let e = i;
        while (s.charCodeAt(e) === c) e++;
        const len = e - i;
        const run = s.slice(i, e);
        if (c === 126 && len !== 2) { buf += run; i = e; continue; }
        const before = i === 0 ? ' ' : s[i - 1];
        const after = e >= n ? ' ' : s[e];
        const wsB = WS.test(before);
        const wsA = WS.test(after);
        const pB = PUNCT.test(before);
        const pA = PUNCT.test(after);
        const left = !wsA && (!pA || wsB || pB);
        const right = !wsB && (!pB || wsA || pA);
        const canOpen = c === 95 ? left && (!right || pB) : left;
        const canClose = c === 95 ? right && (!left || pA) : right;
        flush();
        const node = append({ type: 'text', text: run, delim: true });
        if (canOpen || canClose) {
          const d = { cc: run[0], count: len, orig: len, canOpen, canClose, node, prev: delims, next: null };
          if (delims) delims.next = d;
          delims = d;
        }
        i = e;
        continue;
      }
      case 33: // ![
        if (s.charCodeAt(i + 1) === 91 && nBrackets < MAX_BRACKETS) { openBracket('![', true); i += 2; continue; }
        buf += '!';
        i++;
        continue;
      case 91: // [
        if (nBrackets < MAX_BRACKETS) openBracket('[', false);
        else buf += '[';
        i++;
        continue;
      case 93: // ]
        i = closeBracket(i);
        continue;
      case 60: { // <autolink>, else a literal "<"
        AUTOLINK.lastIndex = i;
        let m = AUTOLINK.exec(s);
        if (m) { flush(); append({ type: 'link', dest: m[1], title: '', children: [{ type: 'text', text: m[1] }] }); i += m[0].length; continue; }
        EMAIL.lastIndex = i;
        m = EMAIL.exec(s);
        if (m) { flush(); append({ type: 'link', dest: `mailto:${m[1]}`, title: '', children: [{ type: 'text', text: m[1] }] }); i += m[0].length; continue; }
        buf += '<';
        i++;
        continue;
      }
      case 38: { // &entity;
        const e = entityAt(s, i);
        if (e) { buf += e.text; i += e.len; } else { buf += '&'; i++; }
        continue;
      }
      case 10: { // line ending
        let k = buf.length;
        while (k > 0 && buf.charCodeAt(k - 1) === 32) k--;
        const spaces = buf.length - k;
        buf = buf.slice(0, k);
        if (spaces >= 2) hardBreak();
        else { flush(); append({ type: 'soft' }); }
        i++;
        while (i < n && (s.charCodeAt(i) === 32 || s.charCodeAt(i) === 9)) i++;
        continue;
      }
      default: { // h / H: a bare http(s):// URL
        const prev = i === 0 ? ' ' : s[i - 1];
        if (WS.test(prev) || '*_~('.includes(prev)) {
          BARE.lastIndex = i;
          if (BARE.test(s)) {
            const e = bareUrlEnd(s, i);
            const url = s.slice(i, e);
            if (/^https?:\/\/[^/?#]/i.test(url)) {
              flush();
              append({ type: 'link', dest: url, title: '', children: [{ type: 'text', text: url }] });
              i = e;
              continue;
            }
          }
        }
        buf += s[i];
        i++;
      }
    }
  }
  flush();
  processEmphasis(null);
  const out = [];
  for (let k = head.next; k; k = k.next) out.push(k);
  return out;

  function hardBreak() {
    flush();
    append({ type: 'br' });
  }

  function openBracket(text, image) {
    flush();
    const node = append({ type: 'text', text });
    brackets = { node, image, active: true, bottom: delims, prev: brackets };
    nBrackets++;
  }

  function closeBracket(at) {
    const op = brackets;
    const pop = () => { brackets = op.prev; nBrackets--; };
    if (!op) { buf += ']'; return at + 1; }
    if (!op.active) { pop(); buf += ']'; return at + 1; }
    const tailInfo = s.charCodeAt(at + 1) === 40 ? linkTail(s, at + 2) : null;
    if (!tailInfo) { pop(); buf += ']'; return at + 1; }
    flush();
    processEmphasis(op.bottom);
    const node = { type: op.image ? 'image' : 'link', dest: tailInfo.dest, title: tailInfo.title, children: [] };
    for (let k = op.node.next; k;) {
      const nx = k.next;
      k.prev = k.next = null;
      node.children.push(k);
      k = nx;
    }
    tail = op.node.prev;
    tail.next = null;
    append(node);
    pop();
    // Links hold no links: earlier "[" openers can no longer make one.
    if (!op.image) for (let b = brackets; b; b = b.prev) {
      if (b.image) continue;
      if (!b.active) break;
      b.active = false;
    }
    return tailInfo.end;
  }
}

/** The plain text of inline nodes (an image's alt text). */
function plainText(nodes) {
  let out = '';
  const stack = [[nodes, 0]];
  while (stack.length) {
    const top = stack[stack.length - 1];
    if (top[1] >= top[0].length) { stack.pop(); continue; }
    const nd = top[0][top[1]++];
    if (nd.type === 'text' || nd.type === 'code') out += nd.text;
    else if (nd.type === 'soft' || nd.type === 'br') out += ' ';
    else if (nd.children) stack.push([nd.children, 0]);
  }
  return out;
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
