// The tokenizers web/highlight.js runs for the languages a keyword table does not describe (bash,
// HTML/XML, CSS, YAML/TOML, diff), and the scanning pieces every tokenizer shares. Each one walks
// the code once, by hand (no regular expression that can backtrack), and hands [class, text]
// segments to `out.emit`; joined, the segments are the code exactly.
import { words } from './highlight-languages.js';

export const isDigit = (c) => c >= 48 && c <= 57;
export const isAlpha = (c) => (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95;
export const isAlnum = (c) => isAlpha(c) || isDigit(c);
export const isSpace = (c) => c === 32 || c === 9 || c === 13;
export const PUNCT = new Set('{}[]()<>=+-*/%!&|^~?:;,.@\\'.split(''));

/** The end of a string opened by code[i] (`q`), escapes skipped; at a newline unless `multi`. */
export function stringEnd(code, i, q, multi, escapes = true) {
  let j = i + 1;
  while (j < code.length) {
    const c = code[j];
    if (c === '\\' && escapes) { j += 2; continue; }
    if (c === q) return j + 1;
    if (c === '\n' && !multi) return j;
    j++;
  }
  return code.length;
}

/** The end of a number starting at i: digits, letters (hex, suffixes, units), _ . and an exponent's sign. */
export function numberEnd(code, i) {
  let j = i + 1;
  const hex = code[i] === '0' && (code[i + 1] === 'x' || code[i + 1] === 'X');
  while (j < code.length) {
    const c = code.charCodeAt(j);
    if (isAlnum(c) || c === 46) j++;
    else if ((c === 43 || c === 45) && !hex && (code[j - 1] === 'e' || code[j - 1] === 'E')) j++;
    else break;
  }
  return j;
}

/** The end of the run of spaces, tabs and CRs that starts at i. */
export function spacesEnd(code, i) {
  let j = i + 1;
  while (j < code.length && isSpace(code.charCodeAt(j))) j++;
  return j;
}

/** Where the line i is on ends: at its "\n", or the code's end. */
export function lineEnd(code, i) {
  const j = code.indexOf('\n', i);
  return j < 0 ? code.length : j;
}

const SH_KW = words('if then else elif fi for while until do done case esac in function return exit export local readonly declare typeset unset shift break continue select time source alias unalias set trap eval exec');
const SH_CMD_NEXT = words('if then else elif do while until time ! exec eval');
const SH_WORD = /[^\s;|&()<>'"`$\\]+/y;

export function shell(code, out) {
  const n = code.length;
  let cmd = true; // at a command's first word
  let i = 0;
  while (i < n) {
    const c = code.charCodeAt(i);
    const ch = code[i];
    if (c === 10) { out.emit(null, '\n'); i++; cmd = true; continue; }
    if (isSpace(c)) {
      const j = spacesEnd(code, i);
      out.emit(null, code.slice(i, j));
      i = j;
      continue;
    }
    if (ch === '#') {
      const j = lineEnd(code, i);
      out.emit('com', code.slice(i, j));
      i = j;
      continue;
    }
    if (ch === '\\') { out.emit(null, code.slice(i, i + 2)); i += 2; continue; }
    if (ch === "'" || ch === '"' || ch === '`') {
      const j = stringEnd(code, i, ch, true, ch !== "'");
      out.emit('str', code.slice(i, j));
      i = j;
      cmd = false;
      continue;
    }
    if (ch === '$') {
      const d = code[i + 1];
      let j = i + 1;
      if (d === '(') { out.emit('punct', '$('); i += 2; cmd = true; continue; }
      if (d === '{') {
        const e = code.indexOf('}', i + 2);
        const nl = code.indexOf('\n', i + 2);
        j = e < 0 || (nl >= 0 && nl < e) ? i + 2 : e + 1;
      } else if (d !== undefined && isAlpha(d.charCodeAt(0))) {
        while (j < n && isAlnum(code.charCodeAt(j))) j++;
      } else if (d !== undefined && (isDigit(d.charCodeAt(0)) || '@*#?$!-'.includes(d))) j = i + 2;
      else { out.emit('punct', '$'); i++; continue; }
      out.emit('var', code.slice(i, j));
      i = j;
      cmd = false;
      continue;
    }
    if (';|&({'.includes(ch)) { out.emit('punct', ch); i++; cmd = true; continue; }
    if (')}<>'.includes(ch)) { out.emit('punct', ch); i++; continue; }
    SH_WORD.lastIndex = i;
    const m = SH_WORD.exec(code);
    if (!m) { out.emit(null, ch); i++; continue; }
    const word = m[0];
    i += word.length;
    if (SH_KW.has(word) && (cmd || word === 'in' || word === 'do' || word === 'then')) {
      out.emit('kw', word);
      cmd = SH_CMD_NEXT.has(word);
    } else if (cmd) {
      const eq = word.indexOf('=');
      if (eq > 0 && /^[A-Za-z_][A-Za-z0-9_]*$/.test(word.slice(0, eq))) { // NAME=value before a command
        out.emit('var', word.slice(0, eq));
        out.emit('punct', '=');
        out.emit(null, word.slice(eq + 1));
      } else {
        out.emit('fn', word);
        cmd = false;
      }
    } else if (word[0] === '-') out.emit('attr', word);
    else if (/^[0-9]+$/.test(word)) out.emit('num', word);
    else out.emit(null, word);
  }
}

const TAG_NAME = /[A-Za-z0-9:_.\-]+/y;
const ATTR_NAME = /[^\s=\/>"']+/y;
const UNQUOTED = /[^\s>]+/y;
const ENTITY = /&[#A-Za-z0-9]{1,32};/y;

export function markup(code, out) {
  const n = code.length;
  let i = 0;
  const take = (re, at) => { re.lastIndex = at; const m = re.exec(code); return m ? m[0] : ''; };
  const until = (s, from, cls) => {
    const e = code.indexOf(s, from);
    const j = e < 0 ? n : e + s.length;
    out.emit(cls, code.slice(i, j));
    i = j;
  };
  while (i < n) {
    const ch = code[i];
    if (ch === '<') {
      if (code.startsWith('<!--', i)) { until('-->', i + 4, 'com'); continue; }
      if (code.startsWith('<![CDATA[', i)) { until(']]>', i + 9, 'str'); continue; }
      if (code[i + 1] === '!' || code[i + 1] === '?') { until('>', i + 2, 'meta'); continue; }
      const close = code[i + 1] === '/';
      const name = take(TAG_NAME, i + (close ? 2 : 1));
      if (!name || !isAlpha(name.charCodeAt(0))) { out.emit('punct', '<'); i++; continue; }
      out.emit('punct', close ? '</' : '<');
      i += close ? 2 : 1;
      out.emit('tag', name);
      i += name.length;
      // Attributes, to ">" or "/>".
      while (i < n) {
        const c = code.charCodeAt(i);
        const d = code[i];
        if (isSpace(c) || c === 10) { out.emit(null, d); i++; continue; }
        if (d === '>') { out.emit('punct', '>'); i++; break; }
        if (d === '/' && code[i + 1] === '>') { out.emit('punct', '/>'); i += 2; break; }
        if (d === '=') {
          out.emit('punct', '=');
          i++;
          while (i < n && isSpace(code.charCodeAt(i))) { out.emit(null, code[i]); i++; }
          if (code[i] === '"' || code[i] === "'") {
            const j = stringEnd(code, i, code[i], true, false);
            out.emit('str', code.slice(i, j));
            i = j;
          } else {
            const v = take(UNQUOTED, i);
            out.emit('str', v);
            i += v.length;
          }
          continue;
        }
        if (d === '"' || d === "'") {
          const j = stringEnd(code, i, d, true, false);
          out.emit('str', code.slice(i, j));
          i = j;
          continue;
        }
        const a = take(ATTR_NAME, i);
        if (a) { out.emit('attr', a); i += a.length; } else { out.emit('punct', d); i++; }
      }
      continue;
    }
    if (ch === '&') {
      const e = take(ENTITY, i);
      if (e) { out.emit('lit', e); i += e.length; continue; }
    }
    let j = i + 1;
    while (j < n && code[j] !== '<' && code[j] !== '&') j++;
    out.emit(null, code.slice(i, j));
    i = j;
  }
}

export function css(code, out) {
  const n = code.length;
  let depth = 0;
  let i = 0;
  const identChar = (c) => isAlnum(c) || c === 45;
  while (i < n) {
    const c = code.charCodeAt(i);
    const ch = code[i];
    if (isSpace(c) || c === 10) { out.emit(null, ch); i++; continue; }
    if (code.startsWith('/*', i)) {
      const e = code.indexOf('*/', i + 2);
      const j = e < 0 ? n : e + 2;
      out.emit('com', code.slice(i, j));
      i = j;
      continue;
    }
    if (code.startsWith('//', i) && depth >= 0 && code[i - 1] !== ':') { // SCSS/Less line comments
      const j = lineEnd(code, i);
      out.emit('com', code.slice(i, j));
      i = j;
      continue;
    }
    if (ch === '"' || ch === "'") {
      const j = stringEnd(code, i, ch, false);
      out.emit('str', code.slice(i, j));
      i = j;
      continue;
    }
    if (ch === '{') { depth++; out.emit('punct', ch); i++; continue; }
    if (ch === '}') { depth = Math.max(0, depth - 1); out.emit('punct', ch); i++; continue; }
    if (ch === '@' || ch === '!' || ch === '#' || ch === '.' || ch === '$') {
      let j = i + 1;
      while (j < n && identChar(code.charCodeAt(j))) j++;
      if (j === i + 1 || (ch === '.' && isDigit(code.charCodeAt(i + 1)))) {
        if (ch === '.' && isDigit(code.charCodeAt(i + 1))) { const e = numberEnd(code, i); out.emit('num', code.slice(i, e)); i = e; continue; }
        out.emit('punct', ch);
        i++;
        continue;
      }
      const cls = ch === '@' || ch === '!' ? 'kw' : ch === '$' ? 'var' : ch === '#' && depth > 0 ? 'num' : 'attr';
      out.emit(cls, code.slice(i, j));
      i = j;
      continue;
    }
    if (isDigit(c)) {
      let j = numberEnd(code, i);
      if (code[j] === '%') j++;
      out.emit('num', code.slice(i, j));
      i = j;
      continue;
    }
    if (isAlpha(c) || c === 45) {
      let j = i + 1;
      while (j < n && identChar(code.charCodeAt(j))) j++;
      let k = j;
      while (k < n && isSpace(code.charCodeAt(k))) k++;
      let cls = null;
      if (code[j] === '(') cls = 'fn';
      else if (depth > 0 && code[k] === ':') cls = 'prop';
      else if (depth === 0) cls = code[i - 1] === ':' ? 'type' : 'tag';
      out.emit(cls, code.slice(i, j));
      i = j;
      continue;
    }
    out.emit(PUNCT.has(ch) ? 'punct' : null, ch);
    i++;
  }
}

const CONFIG_LIT = words('true false null yes no on off ~ True False Null TRUE FALSE NULL Yes No');
const CONFIG_WORD = /[^\s,\[\]{}#"']+/y;

/** YAML (key: value) or TOML/INI (key = value, [table]): keys at a line's start, then values. */
export function config(code, out, toml) {
  const n = code.length;
  let i = 0;
  let lineStart = true;
  while (i < n) {
    const c = code.charCodeAt(i);
    const ch = code[i];
    if (c === 10) { out.emit(null, '\n'); i++; lineStart = true; continue; }
    if (isSpace(c)) { out.emit(null, ch); i++; continue; }
    if (ch === '#' || (toml && ch === ';' && lineStart)) {
      const j = lineEnd(code, i);
      out.emit('com', code.slice(i, j));
      i = j;
      continue;
    }
    if (lineStart) {
      lineStart = false;
      const eol = lineEnd(code, i);
      if (!toml && (code.startsWith('---', i) || code.startsWith('...', i)) && code.slice(i + 3, eol).trim() === '') {
        out.emit('meta', code.slice(i, i + 3));
        i += 3;
        continue;
      }
      if (toml && ch === '[') {
        const e = code.indexOf(']', i);
        const j = e < 0 || e > eol ? eol : code[e + 1] === ']' ? e + 2 : e + 1;
        out.emit('type', code.slice(i, j));
        i = j;
        continue;
      }
      if (!toml && ch === '-' && (code[i + 1] === ' ' || code[i + 1] === '\n' || i + 1 === n)) {
        out.emit('punct', '-');
        i++;
        lineStart = true; // a key may follow the list marker
        continue;
      }
      const keyEnd = toml ? tomlKeyEnd(code, i, eol) : yamlKeyEnd(code, i, eol);
      if (keyEnd > i) {
        out.emit('key', code.slice(i, keyEnd));
        i = keyEnd;
        continue;
      }
    }
    if (ch === '"' || ch === "'") {
      let j;
      if (toml && code.startsWith(ch + ch + ch, i)) {
        const e = code.indexOf(ch + ch + ch, i + 3);
        j = e < 0 ? n : e + 3;
      } else j = stringEnd(code, i, ch, !toml, ch === '"');
      out.emit('str', code.slice(i, j));
      i = j;
      continue;
    }
    if ('[]{},:=|>-?'.includes(ch)) { out.emit('punct', ch); i++; continue; }
    CONFIG_WORD.lastIndex = i;
    const m = CONFIG_WORD.exec(code);
    if (!m) { out.emit(null, ch); i++; continue; }
    const word = m[0];
    let cls = null;
    const f = word.charCodeAt(0);
    if (CONFIG_LIT.has(word)) cls = 'lit';
    else if (isDigit(f) || ((f === 43 || f === 45 || f === 46) && isDigit(word.charCodeAt(1)))) cls = 'num';
    else if (!toml && (f === 38 || f === 42)) cls = 'var';
    else if (!toml && f === 33) cls = 'type';
    out.emit(cls, word);
    i += word.length;
  }
}

/** YAML: the end of `key` in "key: value" / "key:" on this line (quoted keys too), or -1. */
function yamlKeyEnd(code, i, eol) {
  let k = i;
  if (code[i] === '"' || code[i] === "'") {
    k = stringEnd(code, i, code[i], false, code[i] === '"');
    return code[k] === ':' && (k + 1 === eol || isSpace(code.charCodeAt(k + 1))) ? k : -1;
  }
  if ('[{&*!|>%@`'.includes(code[i])) return -1;
  for (; k < eol; k++) {
    const c = code.charCodeAt(k);
    if (c === 58 && (k + 1 === eol || isSpace(code.charCodeAt(k + 1)))) return k;
    if (c === 35 && isSpace(code.charCodeAt(k - 1))) return -1;
  }
  return -1;
}

/** TOML/INI: the end of the key before "=" on this line (trailing spaces left out), or -1. */
function tomlKeyEnd(code, i, eol) {
  for (let k = i; k < eol; k++) {
    const d = code[k];
    if (d === '=') {
      let e = k;
      while (e > i && isSpace(code.charCodeAt(e - 1))) e--;
      return e;
    }
    if (d === '"' || d === "'" || d === '#' || d === '[' || d === '{') return -1;
  }
  return -1;
}

export function diff(code, out) {
  let i = 0;
  while (i <= code.length) {
    const e = lineEnd(code, i);
    const line = code.slice(i, e);
    let cls = null;
    if (/^(diff |index |\+\+\+ |--- |@@|new file|deleted file|similarity|rename )/.test(line)) cls = 'meta';
    else if (line[0] === '+') cls = 'add';
    else if (line[0] === '-') cls = 'del';
    out.emit(cls, line);
    if (e < code.length) out.emit(null, '\n');
    i = e + 1;
  }
}
