// Syntax highlighting for the chat's code blocks: one pass over the code per language, by hand (no
// regular expression that can backtrack), into text nodes and <span class="tok-…"> (web/markdown.css
// colours them). The spans only split the code: their text, joined, is the code exactly.
//
//   highlight(code, lang) -> DocumentFragment      languageOf(name) -> key | null
//
// Classes: tok-kw (keyword), tok-str (string), tok-com (comment), tok-num (number), tok-lit (true,
// false, null, …), tok-fn (a called or defined function, a shell command), tok-type (a type or
// class name), tok-punct (operators and punctuation), tok-var (a shell/YAML variable or anchor),
// tok-tag / tok-attr (markup), tok-key (a JSON/YAML/TOML key), tok-prop (a CSS property),
// tok-meta (preprocessor, decorator, doctype, diff header), tok-add / tok-del (diff lines).
// Unknown languages are plain text.
//
// The language tables are in web/highlight-languages.js, the tokenizers of bash, markup, CSS,
// YAML/TOML and diff in web/highlight-tokenizers.js; this file holds the table-driven tokenizer the
// C-like languages share, and the output.
import { ALIASES, SPECS } from './highlight-languages.js';
import { config, css, diff, isAlnum, isAlpha, isDigit, isSpace, lineEnd, markup, numberEnd, PUNCT, shell, spacesEnd, stringEnd } from './highlight-tokenizers.js';

/** The highlighter a code block's language name uses ("JavaScript" -> "js"), or null: plain text. */
export function languageOf(name) {
  const key = String(name ?? '').trim().toLowerCase();
  return Object.hasOwn(ALIASES, key) ? ALIASES[key] : null;
}

/** `code` as text nodes and token spans; an unknown language is one text node. */
export function highlight(code, lang) {
  const src = String(code ?? '');
  const key = languageOf(lang);
  const out = new Out();
  if (!key) out.emit(null, src);
  else if (key === 'bash') shell(src, out);
  else if (key === 'html' || key === 'xml') markup(src, out);
  else if (key === 'css') css(src, out);
  else if (key === 'yaml') config(src, out, false);
  else if (key === 'toml') config(src, out, true);
  else if (key === 'diff') diff(src, out);
  else clike(src, SPECS[key], out);
  return out.fragment();
}

/** Segments of [class, text], adjacent ones of one class merged. */
class Out {
  constructor() { this.parts = []; this.cls = undefined; this.text = ''; }
  emit(cls, text) {
    if (!text) return;
    if (cls === this.cls) { this.text += text; return; }
    this.end();
    this.cls = cls;
    this.text = text;
  }
  end() { if (this.text) this.parts.push([this.cls, this.text]); this.text = ''; }
  fragment() {
    this.end();
    const frag = document.createDocumentFragment();
    for (const [cls, text] of this.parts) {
      if (cls) {
        const span = document.createElement('span');
        span.className = `tok-${cls}`;
        span.textContent = text;
        frag.appendChild(span);
      } else frag.appendChild(document.createTextNode(text));
    }
    return frag;
  }
}

function clike(code, spec, out) {
  const n = code.length;
  let lineStart = true;
  let i = 0;
  const startsWith = (s) => code.startsWith(s, i);
  while (i < n) {
    const c = code.charCodeAt(i);
    const ch = code[i];
    if (c === 10) { out.emit(null, '\n'); i++; lineStart = true; continue; }
    if (isSpace(c)) {
      const j = spacesEnd(code, i);
      out.emit(null, code.slice(i, j));
      i = j;
      continue;
    }
    const wasLineStart = lineStart;
    lineStart = false;
    if (spec.line.some(startsWith) && !(ch === '#' && spec.preproc)) {
      const j = lineEnd(code, i);
      out.emit('com', code.slice(i, j));
      i = j;
      continue;
    }
    if (spec.block && startsWith('/*')) {
      const e = code.indexOf('*/', i + 2);
      const j = e < 0 ? n : e + 2;
      out.emit('com', code.slice(i, j));
      i = j;
      continue;
    }
    if (spec.preproc && ch === '#' && wasLineStart) {
      const j = lineEnd(code, i);
      out.emit('meta', code.slice(i, j));
      i = j;
      continue;
    }
    if (spec.lifetimes && ch === "'") {
      // 'a' and '\n' are chars; 'a (no closing quote after one char) is a lifetime.
      if (code[i + 1] === '\\' || (code[i + 2] === "'" && code[i + 1] !== "'")) {
        const j = stringEnd(code, i, "'", false);
        out.emit('str', code.slice(i, j));
        i = j;
      } else {
        let j = i + 1;
        while (j < n && isAlnum(code.charCodeAt(j))) j++;
        out.emit('type', code.slice(i, j));
        i = j;
      }
      continue;
    }
    if (spec.quotes.includes(ch)) {
      let j;
      if (spec.triple && code.startsWith(ch + ch + ch, i)) {
        const e = code.indexOf(ch + ch + ch, i + 3);
        j = e < 0 ? n : e + 3;
      } else j = stringEnd(code, i, ch, !!spec.multiline && spec.multiline.includes(ch));
      let cls = 'str';
      if (spec.keys) {
        let k = j;
        while (k < n && isSpace(code.charCodeAt(k))) k++;
        if (code[k] === ':') cls = 'key';
      }
      out.emit(cls, code.slice(i, j));
      i = j;
      continue;
    }
    if (isDigit(c) || (c === 46 && isDigit(code.charCodeAt(i + 1)))) {
      const j = numberEnd(code, i);
      out.emit('num', code.slice(i, j));
      i = j;
      continue;
    }
    if (ch === '@' && spec.decorators && isAlpha(code.charCodeAt(i + 1))) {
      let j = i + 1;
      while (j < n && (isAlnum(code.charCodeAt(j)) || code[j] === '.')) j++;
      out.emit('meta', code.slice(i, j));
      i = j;
      continue;
    }
    if (isAlpha(c) || (c === 36 && spec.dollar)) {
      let j = i + 1;
      while (j < n && (isAlnum(code.charCodeAt(j)) || (spec.dollar && code[j] === '$'))) j++;
      const word = code.slice(i, j);
      const w = spec.ci ? word.toLowerCase() : word;
      let cls = null;
      if (spec.kw.has(w)) cls = 'kw';
      else if (spec.lit.has(w)) cls = 'lit';
      else if (spec.types.has(w)) cls = 'type';
      else if (spec.macros && code[j] === '!' && code[j + 1] !== '=') { j++; cls = 'fn'; }
      else if (code[j] === '(') cls = 'fn';
      else if (spec.capType && c >= 65 && c <= 90) cls = 'type';
      out.emit(cls, code.slice(i, j));
      i = j;
      continue;
    }
    out.emit(PUNCT.has(ch) ? 'punct' : null, ch);
    i++;
  }
}
