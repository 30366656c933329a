import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hasConverter, toGbnf } from "../../../src/3-engines/llama/json-schema";
import { prebuiltLibDir } from "../../../src/3-engines/llama/native/addon-path";
import { OutputScanner, type ScannedEvent } from "../../../src/3-engines/llama/output-scanner";
import { callGrammar, callTrigger, literal, prefixRules, schemaAfterThought, type CallGrammarOptions } from "../../../src/3-engines/llama/tool-calls";

// The grammars are checked by llama.cpp itself: a small program linked against node-llama-cpp's
// prebuilt libllama parses each grammar (llama_grammar_init_impl, as the sampler does) and feeds
// it text character by character (llama_grammar_accept, as llama.cpp's test-gbnf-validator does).

const qwen = { prefix: '<tool_call>\n{"name": "', paramsPrefix: '", "arguments": ', suffix: "}\n</tool_call>", betweenCalls: "\n", sectionSuffix: "<|im_end|>\n" };
const think = { open: "<think>\n", close: "\n</think>" };

// llama.cpp's converter output (json-schema.ts toGbnf) for {city: string, unit?: "c"|"f"}, for {} and for {answer: integer}
const weatherGbnf = String.raw`char ::= [^"\\\x7F\x00-\x1F\uD800-\uDFFF\U00110000-\U001FFFFF] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
city-kv ::= "\"city\"" space ":" space string
root ::= "{" space city-kv ( "," space ( unit-kv ) )? space "}"
space ::= | " " | "\n" [ \t]{0,16}
string ::= "\"" char* "\""
unit ::= ("\"c\"" | "\"f\"")
unit-kv ::= "\"unit\"" space ":" space unit
`;
const emptyGbnf = String.raw`root ::= "{" space "}"
space ::= | " " | "\n" [ \t]{0,16}
`;
const answerGbnf = String.raw`answer-kv ::= "\"answer\"" space ":" space integer
integer ::= ("-"? integral-part)
integral-part ::= [0] | [1-9] [0-9]{0,15}
root ::= "{" space answer-kv space "}"
space ::= | " " | "\n" [ \t]{0,16}
`;
const tools = [
  { name: "get_weather", gbnf: weatherGbnf },
  { name: "now", gbnf: emptyGbnf },
];

const call = (name: string, args: string) => `${qwen.prefix}${name}${qwen.paramsPrefix}${args}${qwen.suffix}`;
const weather = call("get_weather", '{"city": "Paris", "unit": "c"}');
const now = call("now", "{}");

const CHECKER = String.raw`
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
struct llama_vocab;
struct llama_grammar;
struct llama_grammar_element;
using llama_grammar_stacks = std::vector<std::vector<const llama_grammar_element *>>;
llama_grammar * llama_grammar_init_impl(const llama_vocab *, const char *, const char *, bool, const char **, size_t, const int32_t *, size_t);
void llama_grammar_free_impl(llama_grammar *);
void llama_grammar_accept(llama_grammar *, uint32_t);
llama_grammar_stacks & llama_grammar_get_stacks(llama_grammar *);

static std::string slurp(const char * f) { std::ifstream in(f, std::ios::binary); std::stringstream s; s << in.rdbuf(); return s.str(); }

// check GRAMMAR INPUT...: per input "ok", "prefix" (accepted so far, incomplete) or "reject <code point index>", then microseconds
int main(int argc, char ** argv) {
    std::string g = slurp(argv[1]);
    for (int a = 2; a < argc; a++) {
        llama_grammar * grammar = llama_grammar_init_impl(nullptr, g.c_str(), "root", false, nullptr, 0, nullptr, 0);
        if (!grammar) { printf("parse-error\n"); return 0; }
        std::string s = slurp(argv[a]);
        auto t0 = std::chrono::steady_clock::now();
        size_t n = 0;
        bool rejected = false;
        for (size_t i = 0; i < s.size() && !rejected; n++) {
            unsigned char c = s[i];
            int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
            for (int k = 1; k < len && i + k < s.size(); k++) cp = (cp << 6) | (s[i + k] & 0x3F);
            i += len;
            llama_grammar_accept(grammar, cp);
            rejected = llama_grammar_get_stacks(grammar).empty();
        }
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        bool done = false;
        for (auto & st : llama_grammar_get_stacks(grammar)) done = done || st.empty();
        if (rejected) printf("reject %zu %.0f\n", n - 1, us);
        else printf("%s %.0f\n", done ? "ok" : "prefix", us);
        llama_grammar_free_impl(grammar);
    }
}
`;

let dir = "";
let checker = "";

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "tool-calls-"));
  const cxx = Bun.which("c++") ?? Bun.which("g++") ?? Bun.which("clang++");
  if (!cxx) throw new Error("no C++ compiler (c++) to build the grammar checker (the llama addon's build needs one anyway)");
  const lib = prebuiltLibDir();
  const tag = /libllama\.(v[\w.]+)\.so/;
  const libllama = [...new Bun.Glob("libllama.v*.so").scanSync(lib)][0]!;
  const version = tag.exec(libllama)![1]!;
  writeFileSync(join(dir, "check.cpp"), CHECKER);
  checker = join(dir, "check");
  const r = Bun.spawnSync(
    [cxx, "-std=c++17", "-O1", "-o", checker, join(dir, "check.cpp"), `-L${lib}`, `-l:libllama.${version}.so`, `-l:libggml.${version}.so`, "-l:libggml-base.so", `-Wl,-rpath,${lib}`],
    { stdout: "pipe", stderr: "pipe" },
  );
  if (r.exitCode !== 0) throw new Error(`the grammar checker did not build: ${r.stderr.toString()}`);
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** llama.cpp's verdict on each input: "ok", "prefix" or "reject <index>"; "parse-error" for the grammar. */
function check(gbnf: string, inputs: string[]): string[] {
  const g = join(dir, `g${Bun.hash(gbnf)}`);
  writeFileSync(g, gbnf);
  const files = inputs.map((s, i) => {
    const f = join(dir, `in${i}`);
    writeFileSync(f, s);
    return f;
  });
  const r = Bun.spawnSync([checker, g, ...files], { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`the grammar checker failed (${r.exitCode}): ${r.stderr.toString()}`);
  const lines = r.stdout.toString().trim().split("\n");
  if (lines[0] === "parse-error") throw new Error(`llama.cpp does not parse the grammar:\n${r.stderr.toString()}\n${gbnf}`);
  return lines.map((l) => l.replace(/ \d+$/, ""));
}

/** llama.cpp's verdict ("ok", "prefix", "reject") on each input of `cases`, in the same shape, to compare with it. */
function verdicts(gbnf: string, cases: Record<string, string>): Record<string, string> {
  const inputs = Object.keys(cases);
  const got = check(gbnf, inputs);
  return Object.fromEntries(inputs.map((s, i) => [s, got[i]!.split(" ")[0]!]));
}

const base: CallGrammarOptions = { syntax: qwen, tools, parallel: true, mode: "auto", thoughtOpenedInPrompt: false };

describe("callGrammar (checked by llama.cpp's grammar)", () => {
  test("auto, no thought: free text, calls after it or at once, several in a row", () => {
    const { gbnf, lazy, triggerPatterns } = callGrammar(base);
    expect(lazy).toBe(false);
    expect(triggerPatterns).toEqual([]);
    const cases = {
      "": "ok",
      "Just an answer, with <b>tags</b> and a lone <tool_": "ok",
      [weather]: "ok",
      [`Let me look.\n${weather}`]: "ok",
      [`${weather}\n${now}`]: "ok",
      // once the call prefix has begun, a call must follow: its exact syntax, an offered name, its arguments' schema
      "<tool_call> is a tag": "reject",
      [`${qwen.prefix}get_time${qwen.paramsPrefix}{}`]: "reject",
      [call("get_weather", '{"town": "Paris"}')]: "reject",
      '<tool_call>\n{"name":"now"': "reject",
      // nothing but another call after a call
      [`${weather}\nDone.`]: "reject",
      [`${weather}\n`]: "prefix",
    };
    expect(verdicts(gbnf, cases)).toEqual(cases);
  });

  test("every combination of options makes a grammar llama.cpp parses, and a call passes it", () => {
    for (const mode of ["auto", "required"] as const)
      for (const parallel of [false, true])
        for (const thinking of ["none", "may open", "opened"] as const) {
          const o: CallGrammarOptions = { ...base, mode, parallel, thoughtOpenedInPrompt: thinking === "opened", ...(thinking === "none" ? {} : { thought: think }) };
          const output = (thinking === "opened" ? "hm\n</think>\n\n" : "") + now;
          expect([mode, parallel, thinking, check(callGrammar(o).gbnf, [output])[0]]).toEqual([mode, parallel, thinking, "ok"]);
        }
  });

  test("one call only unless parallel", () => {
    const { gbnf } = callGrammar({ ...base, parallel: false });
    expect(verdicts(gbnf, { [weather]: "ok", [`${weather}\n${now}`]: "reject" })).toEqual({ [weather]: "ok", [`${weather}\n${now}`]: "reject" });
  });

  test("auto with a thought that may open: a call prefix inside the thought is reasoning, not a call", () => {
    const { gbnf } = callGrammar({ ...base, thought: think });
    const cases = {
      [`<think>\nI could write <tool_call>\n{"name": "x or anything\n</think>\n\n${weather}`]: "ok",
      "<think>\nhm\n</think>\n\nParis is sunny.": "ok",
      [`Without thinking: ${now}`]: "ok",
      // the model cannot end inside a thought, nor open one after text
      "<think>\nstill thinking": "prefix",
      "Text, then <think>\nno": "reject",
      [`<think>\na\n</think>\n\nx <think>\n`]: "reject",
    };
    expect(verdicts(gbnf, cases)).toEqual(cases);
  });

  test("auto with the thought opened by the prompt: the output starts in it", () => {
    const { gbnf } = callGrammar({ ...base, thought: think, thoughtOpenedInPrompt: true });
    const cases = {
      [`so <tool_call> maybe\n</think>\n\n${weather}`]: "ok",
      "\n</think>\n\nA plain answer.": "ok",
      "thinking on <think>\n and on": "prefix",
    };
    expect(verdicts(gbnf, cases)).toEqual(cases);
  });

  test("required: calls only, after the thought if there is one", () => {
    const cases = { [weather]: "ok", [`\n\n${now}`]: "ok", "No call.": "reject", [`Text ${now}`]: "reject" };
    expect(verdicts(callGrammar({ ...base, mode: "required" }).gbnf, cases)).toEqual(cases);
    const thinking = { [`<think>\nwhich tool? <tool_call> no\n</think>\n\n${weather}`]: "ok", [now]: "ok", "<think>\nx\n</think>\n\nNo call.": "reject" };
    expect(verdicts(callGrammar({ ...base, mode: "required", thought: think }).gbnf, thinking)).toEqual(thinking);
    const opened = { [`x\n</think>\n\n${weather}`]: "ok", [`x\n</think>\n\nNo call.`]: "reject" };
    expect(verdicts(callGrammar({ ...base, mode: "required", thought: think, thoughtOpenedInPrompt: true }).gbnf, opened)).toEqual(opened);
  });

  test("the names and arguments of tools whose rules share names merge (rules are prefixed per tool)", () => {
    // both grammars have root, space and char: each tool keeps its own
    const g = callGrammar({ ...base, tools: [{ name: "a", gbnf: weatherGbnf }, { name: "b", gbnf: answerGbnf }] }).gbnf;
    const cases = { [call("a", '{"city": "x"}')]: "ok", [call("b", '{"answer": 1}')]: "ok", [call("a", '{"answer": 1}')]: "reject" };
    expect(verdicts(g, cases)).toEqual(cases);
  });

  test("odd call syntax is written as GBNF literals (quotes, backslashes, control characters)", () => {
    const syntax = { prefix: '\n[CALL "\\\t', paramsPrefix: "\u0001|", suffix: "\r]", betweenCalls: "" };
    const g = callGrammar({ ...base, syntax, tools: [{ name: 'q"x', gbnf: emptyGbnf }] }).gbnf;
    const one = `${syntax.prefix}q"x${syntax.paramsPrefix}{}${syntax.suffix}`;
    const cases = { [one]: "ok", [one + one]: "ok", [`text${one}`]: "ok", "\n[CALL x": "reject" };
    expect(verdicts(g, cases)).toEqual(cases);
  });

  test("a real tool grammar from llama.cpp's converter merges and parses", () => {
    if (!hasConverter()) return; // the llama addon is not built here: the fixed grammars above stand in
    const gbnf = toGbnf({ type: "object", properties: { q: { type: "string", pattern: "^[a-z]+$" }, n: { type: "integer", minimum: 1 } }, required: ["q"] }, "tools[0]");
    const g = callGrammar({ ...base, thought: think, tools: [{ name: "search", gbnf }] }).gbnf;
    const cases = { [call("search", '{"q": "abc", "n": 2}')]: "ok", [call("search", '{"q": "ABC"}')]: "reject" };
    expect(verdicts(g, cases)).toEqual(cases);
  });

  test("a long thought costs the grammar little (one parse however long the text)", () => {
    const thought = "<think>\n" + "Reasoning about <b> and </thin k> and \n</thinking>, {\"x\": 1}. ".repeat(1200) + "\n</think>\n\n";
    expect(thought.length).toBeGreaterThan(64_000);
    const g = join(dir, "long.gbnf");
    writeFileSync(g, callGrammar({ ...base, thought: think }).gbnf);
    writeFileSync(join(dir, "long.txt"), thought + weather);
    const out = Bun.spawnSync([checker, g, join(dir, "long.txt")], { stdout: "pipe" }).stdout.toString().trim().split(" ");
    expect(out[0]).toBe("ok");
    // measured 18-76 ms for 74,000 characters; a lazy grammar's trigger search took 6.3 s over 64,000 (tool-calls.ts)
    expect(Number(out[1]) / 1000).toBeLessThan(500);
  });
});

describe("schemaAfterThought", () => {
  test("the answer after the thought: lazy from the closing marker, which the grammar starts with", () => {
    const { gbnf, lazy, trigger, triggerPatterns } = schemaAfterThought({ thought: think, gbnf: answerGbnf });
    expect({ lazy, trigger, triggerPatterns }).toEqual({ lazy: true, trigger: "</think>", triggerPatterns: ["</think>"] });
    // what the grammar is fed: the output from the trigger on
    const cases = { '</think>\n\n{"answer": 4}': "ok", '</think>{"answer": 4}': "ok", "</think>\n\nFour": "reject", '{"answer": 4}': "reject", "</think>\n": "prefix" };
    expect(verdicts(gbnf, cases)).toEqual(cases);
  });
});

describe("grammar pieces", () => {
  test("prefixRules renames rules and references, not what is quoted, in a class, a count or a comment", () => {
    const g = String.raw`root ::= "root \" x" [a-z\]root] x{0,16} (x | y-1)* # root x
x ::= "x"
y-1 ::= <[123]> | x`;
    expect(prefixRules(g, "p-")).toBe(String.raw`p-root ::= "root \" x" [a-z\]root] p-x{0,16} (p-x | p-y-1)* # root x
p-x ::= "x"
p-y-1 ::= <[123]> | p-x`);
    expect(() => prefixRules('x ::= "x"', "p-")).toThrow(/root/);
  });

  test("literals escape what GBNF needs", () => {
    expect(literal('a"b\\c\nd\te\u0001é')).toBe('"a\\"b\\\\c\\nd\\te\\x01é"');
  });

  test("the call trigger is the prefix up to its first whitespace after text", () => {
    expect(callTrigger(qwen.prefix)).toBe("<tool_call>");
    expect(callTrigger("\n<tool_call>\n<function=")).toBe("\n<tool_call>");
    expect(callTrigger("[TOOL_CALLS]")).toBe("[TOOL_CALLS]");
  });
});

describe("the scanner reads what the grammar writes", () => {
  test("a thought, text and two calls come out as reasoning, text and the calls", () => {
    const out = `<think>\nmaybe <tool_call> x\n</think>\n\nChecking.\n${weather}\n${now}<|im_end|>\n`;
    const s = new OutputScanner({ stops: [], templateStops: ["<|im_end|>"], thought: think, calls: qwen });
    const events: ScannedEvent[] = [];
    for (const ch of out) events.push(...s.push(ch));
    events.push(...s.finish());
    expect(events.filter((e) => e.type === "reasoning").map((e) => (e as { text: string }).text).join("")).toBe("maybe <tool_call> x");
    expect(events.filter((e) => e.type === "text").map((e) => (e as { text: string }).text).join("")).toBe("\n\nChecking.\n");
    expect(s.calls).toEqual([
      { name: "get_weather", arguments: '{"city": "Paris", "unit": "c"}' },
      { name: "now", arguments: "{}" },
    ]);
    expect(check(callGrammar({ ...base, thought: think }).gbnf, [out.replace("<|im_end|>\n", "")])).toEqual(["ok"]);
  });
});
