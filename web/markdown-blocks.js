// Markdown's blocks for web/markdown.js: a document's lines into a tree of blocks in one pass over
// them. Each block is { t: 'p' | 'h' | 'hr' | 'code' | 'quote' | 'list' | 'table', ... }; the text
// of paragraphs, headings and table cells stays raw here (web/markdown-inline.js parses it). Quotes
// and lists nested deeper than MAX_BLOCK_DEPTH keep their content as one paragraph of text.
//
//   parseBlocks(lines, depth) -> blocks

const MAX_BLOCK_DEPTH = 12; // quotes/lists nested deeper: their content is shown as text
const MAX_TABLE_COLUMNS = 64;
const MAX_TABLE_PADDING = 4096; // empty cells one table adds to its short rows, at most

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

/** The blocks of `lines` (a quote or list item's own lines at `depth` > 0). */
export function parseBlocks(lines, depth) {
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
