// The files LlamaChat itself imports (node-llama-cpp's exports map hides them from a bare
// specifier): the same module instances in the dev tree and in the bundled executable.
import { FunctionCallParamsGrammar as ParamsGrammarClass } from "../../../node_modules/node-llama-cpp/dist/evaluator/LlamaChat/utils/FunctionCallParamsGrammar.js";
import { GbnfGrammarGenerator as GeneratorClass } from "../../../node_modules/node-llama-cpp/dist/utils/gbnfJson/GbnfGrammarGenerator.js";
import { GbnfNumber as NumberClass } from "../../../node_modules/node-llama-cpp/dist/utils/gbnfJson/terminals/GbnfNumber.js";

// node-llama-cpp 3.22.1 generates a tool call's arguments under a grammar built from the
// function's params, then checks them again with a second validator that disagrees with that
// grammar — and LlamaChat throws, so the request ends in a 500 for output the grammar allowed
// (issue 24, "No 5xx from model output"):
//   - strings: the grammar counts maxLength in characters (code points, as JSON Schema does); the
//     validator in UTF-16 units, so "Expected at most 20 characters but got 23" for astral chars;
//   - integers: the grammar allows an exponent ("1e-5"), the validator then says
//     `Expected type "integer" but got "number"`.
// The sound fix is one authority: the integer rule loses its exponent (a JSON integer literal,
// which is what JSON Schema's integer means for generated text), and the arguments are accepted
// as the grammar produced them — parsed, never re-validated. Applied once, at import.

/**
 * Strict tools (issue 24): the arguments are generated under llama.cpp's grammar for the schema
 * (json-schema.ts) instead of node-llama-cpp's subset. The params handed to node-llama-cpp carry a
 * marker def; its grammar generator, on meeting the marker, writes that grammar as the call's.
 */
const MARKER = "__appliance_gbnf_";
const strictGrammars = new Map<string, string>();

/** Registers a strict call grammar; returns the def name to put in the params' `$defs`. */
export function strictCallMarker(gbnf: string): string {
  const id = Bun.hash(gbnf).toString(36);
  strictGrammars.delete(id);
  strictGrammars.set(id, gbnf);
  if (strictGrammars.size > 512) strictGrammars.delete(strictGrammars.keys().next().value!);
  return MARKER + id;
}

type Generator = { prototype: { registerDefs(defs: Record<string, unknown>): void; generateGbnfFile(rootGrammar: string): string } };

type ParamsGrammar = { prototype: { parseParams(callText: string): { params: unknown; raw: string } } };
type NumberTerminal = { prototype: { allowFractional: boolean; getGrammar(): string } };

const TRIGGER = "\n".repeat(4);

export function patchCallGrammar(): void {
  const FunctionCallParamsGrammar = ParamsGrammarClass as unknown as ParamsGrammar;
  const GbnfNumber = NumberClass as unknown as NumberTerminal;
  const proto = FunctionCallParamsGrammar.prototype as ParamsGrammar["prototype"] & { __appliance?: true };
  if (proto.__appliance) return;
  const parse = proto.parseParams;
  proto.parseParams = function (callText: string) {
    const end = callText.lastIndexOf(TRIGGER);
    const text = end < 0 ? "" : callText.slice(0, end);
    // The grammar produced it, so it is JSON of the declared shape; only a malformed end is node-llama-cpp's to report.
    if (!text.trim()) return parse.call(this, callText);
    return { params: JSON.parse(text), raw: text };
  };
  const grammar = GbnfNumber.prototype.getGrammar;
  GbnfNumber.prototype.getGrammar = function () {
    return this.allowFractional ? grammar.call(this) : '"-"? ("0" | [1-9] [0-9]{0,15})';
  };
  const GbnfGrammarGenerator = GeneratorClass as unknown as Generator;
  const gen = GbnfGrammarGenerator.prototype as Generator["prototype"] & { __strict?: string };
  const registerDefs = gen.registerDefs;
  gen.registerDefs = function (this: typeof gen, defs: Record<string, unknown>) {
    for (const name of Object.keys(defs ?? {})) if (name.startsWith(MARKER) && strictGrammars.has(name.slice(MARKER.length))) this.__strict ??= strictGrammars.get(name.slice(MARKER.length));
    return registerDefs.call(this, defs);
  };
  const generateGbnfFile = gen.generateGbnfFile;
  gen.generateGbnfFile = function (this: typeof gen, rootGrammar: string) {
    if (!this.__strict) return generateGbnfFile.call(this, rootGrammar);
    // The call grammar is the JSON followed by node-llama-cpp's end-of-params trigger.
    return `${this.__strict.replace(/^root ::= /m, "strict-args ::= ")}root ::= strict-args "${"\\n".repeat(4)}"\n`;
  };
  proto.__appliance = true;
}

patchCallGrammar();
