// Markdown's inlines for web/markdown.js: a paragraph's (heading's, table cell's) text into inline
// nodes, in one pass over its characters. While parsing the nodes are a doubly linked list;
// emphasis and links then wrap ranges of it into nodes with `children` arrays. The emphasis pass is
// CommonMark's delimiter algorithm (with its openers_bottom, so it stays linear); unresolved "["
// openers past MAX_BRACKETS are plain text.
//
//   parseInline(text) -> nodes      { type: 'text' | 'code' | 'br' | 'soft' | 'em' | 'strong' |
//                                     'del' | 'link' | 'image', text?, dest?, title?, children? }
//   plainText(nodes) -> string      (an image's alt text)

const MAX_BRACKETS = 256; // unresolved "[" openers tracked at once; more are plain text

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

/** The inline nodes of `s`: text, code spans, breaks, emphasis, links and images. */
export function parseInline(s) {
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
export function plainText(nodes) {
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
