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

const words = (s) => new Set(s.split(/\s+/).filter(Boolean));

const JS_KW = 'break case catch class const continue debugger default delete do else export extends finally for function if import in instanceof let new of return super switch this throw try typeof var void while with yield async await static get set from as';
const C_TYPES = 'char double float int long short signed unsigned void bool size_t ssize_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t uintptr_t FILE';
const C_KW = 'auto break case const continue default do else enum extern for goto if inline register restrict return sizeof static struct switch typedef union volatile while';

const C_LIKE = { line: ['//'], block: true, quotes: '"\'' };
const SPECS = {
  js: { ...C_LIKE, quotes: '"\'`', multiline: '`', kw: words(JS_KW), lit: words('true false null undefined NaN Infinity'), types: words(''), capType: true, dollar: true, decorators: true },
  ts: {
    ...C_LIKE, quotes: '"\'`', multiline: '`', capType: true, dollar: true, decorators: true,
    kw: words(`${JS_KW} interface type enum implements namespace declare abstract private protected public readonly keyof infer is satisfies module override`),
    lit: words('true false null undefined NaN Infinity'),
    types: words('string number boolean any unknown never void object symbol bigint'),
  },
  json: { ...C_LIKE, quotes: '"', keys: true, kw: words(''), lit: words('true false null'), types: words('') },
  python: {
    line: ['#'], block: false, quotes: '"\'', triple: true, decorators: true, capType: true,
    kw: words('and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield match case'),
    lit: words('True False None'),
    types: words('int float str bool list dict set tuple bytes bytearray object type complex frozenset'),
  },
  c: { ...C_LIKE, preproc: true, kw: words(C_KW), lit: words('true false NULL'), types: words(C_TYPES) },
  cpp: {
    ...C_LIKE, preproc: true, capType: false,
    kw: words(`${C_KW} alignas alignof and asm catch class constexpr consteval constinit co_await co_return co_yield decltype delete explicit export friend mutable namespace new noexcept not operator or private protected public requires static_assert static_cast dynamic_cast reinterpret_cast const_cast template this throw try typeid typename using virtual override final concept`),
    lit: words('true false nullptr NULL'),
    types: words(`${C_TYPES} wchar_t char8_t char16_t char32_t std string vector map unique_ptr shared_ptr`),
  },
  go: {
    ...C_LIKE, quotes: '"\'`', multiline: '`',
    kw: words('break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var'),
    lit: words('true false nil iota'),
    types: words('bool byte complex64 complex128 error float32 float64 int int8 int16 int32 int64 rune string uint uint8 uint16 uint32 uint64 uintptr any'),
  },
  rust: {
    ...C_LIKE, quotes: '"', lifetimes: true, macros: true, capType: true,
    kw: words('as async await break const continue crate dyn else enum extern fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait type unsafe use where while'),
    lit: words('true false None Some Ok Err'),
    types: words('i8 i16 i32 i64 i128 isize u8 u16 u32 u64 u128 usize f32 f64 bool char str String Vec Option Result Box'),
  },
  java: {
    ...C_LIKE, decorators: true, capType: true,
    kw: words('abstract assert break case catch class const continue default do else enum extends final finally for goto if implements import instanceof interface native new package private protected public return static strictfp super switch synchronized this throw throws transient try volatile while var record yield sealed permits'),
    lit: words('true false null'),
    types: words('boolean byte char double float int long short void'),
  },
  sql: {
    line: ['--', '#'], block: true, quotes: '\'"`', ci: true,
    kw: words('select from where and or not insert into values update set delete create table drop alter add column index primary key foreign references join inner left right outer full cross natural on using as group by order having limit offset union all distinct case when then else end is like ilike in between exists with recursive returning default constraint unique check view trigger begin commit rollback transaction if replace asc desc over partition grant revoke database schema explain analyze vacuum pragma'),
    lit: words('true false null'),
    types: words('int integer bigint smallint tinyint text varchar char character boolean bool date time timestamp timestamptz interval real double precision float numeric decimal serial bigserial blob bytea json jsonb uuid'),
  },
  generic: {
    line: ['//', '#'], block: true, quotes: '"\'`', capType: true, decorators: true,
    kw: words('if else elif elsif unless for foreach while do loop until return function func fn fun def class struct enum interface trait impl module import export from use using package namespace let var val const mut static public private protected internal new this self super try catch except finally throw raise switch case when match break continue yield async await end then begin in of is not and or'),
    lit: words('true false null nil none True False None undefined'),
    types: words('int float double string bool boolean char void'),
  },
};

const ALIASES = {
  js: 'js', javascript: 'js', jsx: 'js', mjs: 'js', cjs: 'js', node: 'js',
  ts: 'ts', typescript: 'ts', tsx: 'ts', mts: 'ts', cts: 'ts',
  json: 'json', jsonc: 'json', json5: 'json', jsonl: 'json', geojson: 'json',
  python: 'python', py: 'python', python3: 'python', py3: 'python', ipython: 'python', pycon: 'python',
  bash: 'bash', sh: 'bash', shell: 'bash', zsh: 'bash', ksh: 'bash', console: 'bash', shellsession: 'bash', terminal: 'bash',
  c: 'c', h: 'c',
  cpp: 'cpp', 'c++': 'cpp', cc: 'cpp', cxx: 'cpp', hpp: 'cpp', hh: 'cpp', hxx: 'cpp', cuda: 'cpp', cu: 'cpp',
  go: 'go', golang: 'go',
  rust: 'rust', rs: 'rust',
  java: 'java',
  sql: 'sql', mysql: 'sql', postgresql: 'sql', postgres: 'sql', psql: 'sql', sqlite: 'sql', plsql: 'sql', tsql: 'sql',
  html: 'html', htm: 'html', xhtml: 'html', vue: 'html', svelte: 'html',
  xml: 'xml', svg: 'xml', xsl: 'xml', xslt: 'xml', plist: 'xml', rss: 'xml', atom: 'xml',
  css: 'css', scss: 'css', less: 'css', sass: 'css',
  yaml: 'yaml', yml: 'yaml',
  toml: 'toml', ini: 'toml', cfg: 'toml', conf: 'toml', properties: 'toml',
  diff: 'diff', patch: 'diff', udiff: 'diff',
};
for (const g of 'kotlin kt swift cs csharp c# fsharp php ruby rb scala lua perl pl r dart zig haskell hs elixir ex exs erlang clojure nim julia groovy gradle objc objective-c matlab powershell ps1 dockerfile docker makefile make cmake nix hcl terraform tf proto protobuf graphql gql solidity sol v vb'.split(' ')) ALIASES[g] = 'generic';

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

const isDigit = (c) => c >= 48 && c <= 57;
const isAlpha = (c) => (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95;
const isAlnum = (c) => isAlpha(c) || isDigit(c);
const isSpace = (c) => c === 32 || c === 9 || c === 13;
const PUNCT = new Set('{}[]()<>=+-*/%!&|^~?:;,.@\\'.split(''));

/** The end of a string opened by code[i] (`q`), escapes skipped; at a newline unless `multi`. */
function stringEnd(code, i, q, multi, escapes = true) {
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
function numberEnd(code, i) {
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
      let j = i + 1;
      while (j < n && isSpace(code.charCodeAt(j))) j++;
      out.emit(null, code.slice(i, j));
      i = j;
      continue;
    }
    const wasLineStart = lineStart;
    lineStart = false;
    if (spec.line.some(startsWith) && !(ch === '#' && spec.preproc)) {
      let j = code.indexOf('\n', i);
      if (j < 0) j = n;
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
      let j = code.indexOf('\n', i);
      if (j < 0) j = n;
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

const SH_KW = words('if then else elif fi for while until do done case esac in function return exit export local readonly declare typeset unset shift break continue select time source alias unalias set trap eval exec');
const SH_CMD_NEXT = words('if then else elif do while until time ! exec eval');
const SH_WORD = /[^\s;|&()<>'"`$\\]+/y;

function shell(code, out) {
  const n = code.length;
  let cmd = true; // at a command's first word
  let i = 0;
  while (i < n) {
    const c = code.charCodeAt(i);
    const ch = code[i];
    if (c === 10) { out.emit(null, '\n'); i++; cmd = true; continue; }
    if (isSpace(c)) {
      let j = i + 1;
      while (j < n && isSpace(code.charCodeAt(j))) j++;
      out.emit(null, code.slice(i, j));
      i = j;
      continue;
    }
    if (ch === '#') {
      let j = code.indexOf('\n', i);
      if (j < 0) j = n;
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

function markup(code, out) {
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

function css(code, out) {
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
      let j = code.indexOf('\n', i);
      if (j < 0) j = n;
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
function config(code, out, toml) {
  const n = code.length;
  let i = 0;
  let lineStart = true;
  while (i < n) {
    const c = code.charCodeAt(i);
    const ch = code[i];
    if (c === 10) { out.emit(null, '\n'); i++; lineStart = true; continue; }
    if (isSpace(c)) { out.emit(null, ch); i++; continue; }
    if (ch === '#' || (toml && ch === ';' && lineStart)) {
      let j = code.indexOf('\n', i);
      if (j < 0) j = n;
      out.emit('com', code.slice(i, j));
      i = j;
      continue;
    }
    if (lineStart) {
      lineStart = false;
      let eol = code.indexOf('\n', i);
      if (eol < 0) eol = n;
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

function diff(code, out) {
  let i = 0;
  while (i <= code.length) {
    let e = code.indexOf('\n', i);
    if (e < 0) e = code.length;
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
