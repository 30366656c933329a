// Pure: the GBNF grammar under which a chat model writes tool calls, and the one of a
// response_format's JSON answer after a thought, built from the template's syntax in written form.
// OutputScanner (output-scanner.ts) reads the same syntax back out of the text.
//
// Why no lazy grammar. llama.cpp's lazy grammar starts at a regex trigger, which it matches again
// against all the output so far after every token (llama-grammar.cpp, llama_grammar_accept_impl),
// with libstdc++'s std::regex: a backtracking matcher that recurses once per character it steps
// over. Measured on this machine (g++ 12, the same matcher llama.cpp links, 4 characters a token):
//   - a thought-aware trigger such as `^\s*(?:<think>[\s\S]*?</think>|(?!\s*<think>))[\s\S]*?(<tool_call>[\s\S]*)$`
//     steps over the whole thought on every token: the process dies (SIGSEGV, stack overflow)
//     once a thought reaches 32,000-48,000 characters on an 8 MB stack (a std::thread's, where the
//     decode loop samples), 6,000 on 1 MB; over a 16,000-character thought the checks took 1.8 s;
//   - even the plain word trigger llama.cpp itself uses (`<tool_call>`) took 6.3 s over an output
//     of 64,000 characters, 0.4 ms a token on average: the search is over the whole output each time;
//   - spans bounded as `[\s\S]{0,2048}?` stay safe but still pay the whole-output search.
// Model output must never crash the server, so every grammar here holds from the first token
// instead, and is thought-aware by construction: a thought is "any text up to its closing
// marker", free answer text is "any text in which the call prefix has not begun", and a call
// follows where the prefix begins. The grammar then costs what any grammar costs in the decode
// loop (the sampled token checked against it; the vocabulary only when it is refused), and that
// does not grow with the output: llama.cpp's matcher took 18-76 ms in all over a thought of 74,000
// characters (0.3-1 µs a character, tool-calls.test.ts), where the trigger searches above took seconds.
// So call grammars are never lazy. The one lazy grammar here is a schema after a thought
// (schemaAfterThought): triggered by the thought's closing marker, a literal — the engine passes
// it as a trigger token where the marker is one (Qwen's `</think>`), which needs no regex at all —
// so that until then nothing is constrained and the model may end its thought with end of
// generation (it is then closed and answered under the schema: generation.ts, issue 24).
//
// Free text under the grammar is unconstrained but for two things, both as OutputScanner reads
// the text: once it holds the start of the call prefix (up to its first whitespace: `<tool_call>`
// for Qwen 3) the rest of a call must follow, and it may not open a thought again. A thought may
// open at the start of the output only (or is open already, when the prompt opened it), and the
// model cannot end inside it: end of generation is allowed once the grammar is complete.

/** A template's call syntax, written out (control tokens as their text): node-llama-cpp's `ChatWrapper.settings.functions`. */
export interface CallSyntax {
  /** Opens a call, up to its function name: Qwen 3 `<tool_call>\n{"name": "`. */
  prefix: string;
  /** Between the name and the arguments: `", "arguments": `. */
  paramsPrefix: string;
  /** Closes a call after its arguments: `}\n</tool_call>`. */
  suffix: string;
  /** Between two calls of one turn (`parallelism.call.betweenCalls`): `\n`. */
  betweenCalls?: string;
  /** After the last call (`parallelism.call.sectionSuffix`): `<|im_end|>\n`; the model ends with end-of-generation instead. */
  sectionSuffix?: string;
}

export interface ThoughtMarkers {
  open: string;
  close: string;
}

export interface GrammarResult {
  gbnf: string;
  /** Applied only from `trigger` on (llama.cpp's lazy grammar); false for every call grammar. */
  lazy: boolean;
  /** The trigger as llama.cpp patterns: a literal, escaped (never `[\s\S]*`: see above). */
  triggerPatterns: string[];
  /** The trigger text (a lazy grammar's root starts with it). */
  trigger?: string;
}

export interface CallGrammarOptions {
  syntax: CallSyntax;
  /** Each tool's arguments: a complete GBNF grammar whose `root` is the arguments (json-schema.ts `toGbnf`). */
  tools: readonly { name: string; gbnf: string }[];
  /** Several calls in one turn. */
  parallel: boolean;
  /** "auto": text, or calls (after text or not); "required": calls only. */
  mode: "auto" | "required";
  /** The prompt ends inside an open thought: the output starts in it. */
  thoughtOpenedInPrompt: boolean;
  /** The template's thought markers, when the model thinks in this request. */
  thought?: ThoughtMarkers;
}

/** Whitespace between a thought and what follows it: Qwen writes "\n\n". */
const WS = 'ws ::= [ \\t\\n]{0,8}';

/**
 * The grammar of a turn that may (auto) or must (required) call tools:
 *   root ::= [thought] ( free text [calls] | ws calls )
 * Tool rules are merged under the prefix `t<i>-`. Names are written as
 * given (OutputScanner reports them as written); parallel calls are joined by `betweenCalls`.
 */
export function callGrammar(o: CallGrammarOptions): GrammarResult {
  if (o.tools.length === 0) throw new Error("callGrammar: no tools");
  const { syntax } = o;
  const trigger = callTrigger(syntax.prefix);
  const rest = syntax.prefix.slice(trigger.length);
  const rules: string[] = [];
  const alternatives = o.tools.map((t, i) => `${literal(t.name)} ${literal(syntax.paramsPrefix)} t${i}-root`);
  rules.push(`call-body ::= ( ${alternatives.join(" | ")} ) ${literal(syntax.suffix)}`);
  rules.push(`call ::= ${literal(syntax.prefix)} call-body`);
  const more = o.parallel ? ` ( ${seq(literal(syntax.betweenCalls ?? ""), "call")} )*` : "";
  rules.push(`calls ::= call${more}`);
  o.tools.forEach((t, i) => rules.push(prefixRules(t.gbnf, `t${i}-`)));

  let body: string;
  if (o.mode === "required") body = "ws calls";
  else {
    // free text, until the call prefix begins; a thought may not open in it
    rules.push(`after-trigger ::= ${seq(literal(rest), `call-body${more}`)}`);
    const markers: Marker[] = [{ text: trigger, then: "after-trigger" }];
    if (o.thought) markers.push({ text: o.thought.open, then: null });
    rules.push(...textRules("text", markers, true));
    body = "text-0";
  }
  return nonLazy([`root ::= ${thoughtLead(o)}${body}`, ...rules, ...(o.thought ? textRules("thought", [{ text: o.thought.close, then: "" }], false) : []), WS]);
}

/**
 * A json_schema answer after thinking: lazy from the thought's closing marker (without the
 * whitespace around it), `root ::= close ws answer`.
 */
export function schemaAfterThought(o: { thought: ThoughtMarkers; gbnf: string }): GrammarResult {
  const close = o.thought.close.trim();
  const { gbnf } = nonLazy([`root ::= ${literal(close)} ws answer-root`, prefixRules(o.gbnf, "answer-"), WS]);
  return { gbnf, lazy: true, triggerPatterns: [close.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")], trigger: close };
}

function nonLazy(rules: string[]): GrammarResult {
  return { gbnf: rules.join("\n").replace(/\n+$/, "") + "\n", lazy: false, triggerPatterns: [] };
}

/** What comes before the answer part of root: the rest of an open thought, an optional one, or nothing. */
function thoughtLead(o: { thought?: ThoughtMarkers; thoughtOpenedInPrompt: boolean }): string {
  if (!o.thought) return "";
  if (o.thoughtOpenedInPrompt) return "thought-0 ";
  return `( [ \\t\\n]{0,4} ${literal(o.thought.open)} thought-0 )? `;
}

/**
 * The part of a call prefix that commits free text to a call: up to its first whitespace after
 * some other text (`<tool_call>` of `<tool_call>\n{"name": "`), leading whitespace included. The
 * grammar then requires the rest of the prefix, so a near miss (`{"name":"` without the space)
 * cannot pass as text that the scanner would show.
 */
export function callTrigger(prefix: string): string {
  return /^\s*\S+/.exec(prefix)?.[0] ?? prefix;
}

function seq(...parts: string[]): string {
  return parts.filter((p) => p !== '""' && p !== "").join(" ");
}

/** A GBNF string literal (llama-grammar.cpp parse_char: \\ \" \n \r \t \xHH; anything else as UTF-8). */
export function literal(s: string): string {
  let out = '"';
  for (const ch of s) out += escapeChar(ch, '"\\');
  return out + '"';
}

function escapeChar(ch: string, special: string): string {
  if (special.includes(ch)) return "\\" + ch;
  if (ch === "\n") return "\\n";
  if (ch === "\r") return "\\r";
  if (ch === "\t") return "\\t";
  const c = ch.codePointAt(0)!;
  if (c < 0x20 || c === 0x7f) return "\\x" + c.toString(16).padStart(2, "0");
  return ch;
}

/** A GBNF character class of `chars` (negated: everything else). */
function charClass(chars: Iterable<string>, negated = false): string {
  let out = negated ? "[^" : "[";
  for (const ch of chars) out += escapeChar(ch, "\\]^-[");
  return out + "]";
}

/**
 * Renames every rule of a GBNF grammar with `prefix`, references included, so that several
 * grammars merge into one (`root` becomes `<prefix>root`). Rule names are [a-zA-Z0-9-]+; what
 * looks like one inside a string literal, a character class, a repetition count ({0,16}), a
 * token reference (<...>) or a comment is left alone.
 */
export function prefixRules(gbnf: string, prefix: string): string {
  let out = "";
  let i = 0;
  const skipTo = (close: string, escapes: boolean) => {
    let j = i + 1;
    while (j < gbnf.length && gbnf[j] !== close) j += escapes && gbnf[j] === "\\" ? 2 : 1;
    out += gbnf.slice(i, j + 1);
    i = j + 1;
  };
  while (i < gbnf.length) {
    const c = gbnf[i]!;
    if (c === '"') skipTo('"', true);
    else if (c === "[") skipTo("]", true);
    else if (c === "{") skipTo("}", false);
    else if (c === "<") skipTo(">", false);
    else if (c === "#") skipTo("\n", false);
    else if (/[a-zA-Z0-9-]/.test(c)) {
      let j = i;
      while (j < gbnf.length && /[a-zA-Z0-9-]/.test(gbnf[j]!)) j++;
      out += prefix + gbnf.slice(i, j);
      i = j;
    } else {
      out += c;
      i++;
    }
  }
  if (!new RegExp(`^${prefix}root\\s*::=`, "m").test(out)) throw new Error(`prefixRules: the grammar has no root rule`);
  return out.replace(/\n+$/, "");
}

/** A marker in text: on its last character, `then` follows (a GBNF sequence; "" for nothing), or it is not allowed (null). */
interface Marker {
  text: string;
  then: string | null;
}

/**
 * Rules `<name>-0` … for "text up to the first marker": a deterministic automaton over the
 * characters (Aho-Corasick, by code point), one rule per state, so that llama.cpp follows a single
 * parse however long the text. On a marker's last character its `then` follows; with `mayEnd` the
 * text may also end in any state (end of generation in free text), without it only at a marker.
 */
function textRules(name: string, markers: Marker[], mayEnd: boolean): string[] {
  // trie of the markers
  const next: Map<string, number>[] = [new Map()];
  const ends: (Marker | null)[] = [null];
  for (const m of markers) {
    if (!m.text) throw new Error("textRules: an empty marker");
    let s = 0;
    for (const ch of m.text) {
      let t = next[s]!.get(ch);
      if (t === undefined) {
        t = next.push(new Map()) - 1;
        ends.push(null);
        next[s]!.set(ch, t);
      }
      s = t;
    }
    ends[s] ??= m;
  }
  const alphabet = [...new Set(markers.flatMap((m) => [...m.text]))];
  // failure links, breadth first; a state whose longest proper suffix ends a marker ends it too
  const fail = new Array<number>(next.length).fill(0);
  const order: number[] = [];
  for (const t of next[0]!.values()) order.push(t);
  for (let k = 0; k < order.length; k++) {
    const s = order[k]!;
    ends[s] ??= ends[fail[s]!] ?? null;
    for (const [ch, t] of next[s]!) {
      let f = fail[s]!;
      while (f !== 0 && !next[f]!.has(ch)) f = fail[f]!;
      fail[t] = next[f]!.get(ch) ?? 0;
      if (fail[t] === t) fail[t] = 0;
      order.push(t);
    }
  }
  const step = (s: number, ch: string): number => {
    for (;;) {
      const t = next[s]!.get(ch);
      if (t !== undefined) return t;
      if (s === 0) return 0;
      s = fail[s]!;
    }
  };
  // states reached without completing a marker get rules, numbered in order of discovery; any
  // character that leads nowhere (back to the start) is in one negated class
  const ids = new Map<number, number>([[0, 0]]);
  const rules: string[] = [];
  for (let k = 0; k < ids.size; k++) {
    const s = [...ids.keys()][k]!;
    const alts: string[] = mayEnd ? [""] : [];
    const special: string[] = [];
    const byTarget = new Map<number, string[]>();
    for (const ch of alphabet) {
      const t = step(s, ch);
      const end = ends[t];
      if (end) {
        special.push(ch);
        if (end.then !== null) alts.push(seq(literal(ch), end.then));
      } else if (t !== 0) {
        special.push(ch);
        if (!ids.has(t)) ids.set(t, ids.size);
        byTarget.set(t, [...(byTarget.get(t) ?? []), ch]);
      }
    }
    alts.push(`${charClass(special, true)} ${name}-0`);
    for (const [t, chars] of byTarget) alts.push(`${chars.length === 1 ? literal(chars[0]!) : charClass(chars)} ${name}-${ids.get(t)}`);
    rules.push(`${name}-${ids.get(s)} ::= ${alts.join(" | ")}`);
  }
  return rules;
}
