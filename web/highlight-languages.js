// The languages web/highlight.js knows: a keyword table for each C-like one (the table-driven
// tokenizer in web/highlight.js reads it: line/block comments, quotes, keywords, literals, types and
// a few switches) and the names a code block may give each language. Bash, HTML/XML, CSS, YAML,
// TOML and diff have tokenizers of their own (web/highlight-tokenizers.js); a name listed here as
// 'generic' gets a table of common keywords.
//
//   SPECS: key -> table      ALIASES: a lower-case name -> key      words('a b c') -> Set

export const words = (s) => new Set(s.split(/\s+/).filter(Boolean));

const JS_KW = 'break case catch class const continue debugger default delete do else export extends finally for function if import in instanceof let new of return super switch this throw try typeof var void while with yield async await static get set from as';
const C_TYPES = 'char double float int long short signed unsigned void bool size_t ssize_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t uintptr_t FILE';
const C_KW = 'auto break case const continue default do else enum extern for goto if inline register restrict return sizeof static struct switch typedef union volatile while';

const C_LIKE = { line: ['//'], block: true, quotes: '"\'' };
export const SPECS = {
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

export const ALIASES = {
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
