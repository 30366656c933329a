import { expect, test } from "bun:test";
import { Prng } from "../helpers/fuzz/prng";
import { checkJsonSchema } from "../helpers/json-schema-check";
import { useDemoServer } from "../interop/demo-server";

// Issue 42: under a strict schema the demo model wrote numbers like 1e601694 (Infinity to
// JSON.parse) and integers past 2^53; a tool with `parameters: {}` was called with a bare number.
// Random JSON Schemas (numbers, integers with and without bounds, nested objects, arrays, empty
// parameters, json_object) × seeds, on the demo model (random weights: it writes whatever the
// grammar allows) through every way a schema enters (chat, streamed chat, Responses, Messages;
// response formats, json_object with and without a schema, forced tool calls whose parameters'
// top level is as is, empty, absent, a union, nullable, a $ref or a scalar type): every answer that
// ends on its own parses into finite numbers, safe integers where the schema says integer, an
// object where arguments or json_object are asked for, and fits its schema. A fixed
// seed (GRAMMAR_FUZZ_SEED) and a bounded time (GRAMMAR_FUZZ_S) keep it repeatable and short.

const SEED = Number(process.env.GRAMMAR_FUZZ_SEED ?? 42042);
const SECONDS = Number(process.env.GRAMMAR_FUZZ_S ?? 20);

type Schema = Record<string, any>;

function numberSchema(r: Prng): Schema {
  if (r.chance(0.4)) return { type: "number" };
  const bound = () => r.pick([0, 1, 7, 12, 200, 99999, 2 ** 40, -5, -1000]);
  switch (r.int(0, 3)) {
    case 0:
      return { type: "integer" };
    case 1:
      return { type: "integer", minimum: bound() };
    case 2:
      return { type: "integer", maximum: bound() };
    default: {
      const [a, b] = [bound(), bound()].sort((x, y) => x - y);
      return { type: "integer", minimum: a, maximum: b };
    }
  }
}

function objectSchema(r: Prng, depth: number): Schema {
  const properties: Record<string, Schema> = {};
  for (let i = 0, n = r.int(1, 3); i < n; i++) {
    const kind = r.weighted([["number", 5], ["array", 2], ["object", depth < 2 ? 2 : 0], ["string", 1], ["boolean", 1]] as const);
    properties[`p${i}`] =
      kind === "number" ? numberSchema(r)
      : kind === "array" ? { type: "array", items: numberSchema(r), maxItems: 3 }
      : kind === "object" ? objectSchema(r, depth + 1)
      : kind === "string" ? { type: "string", maxLength: 6 }
      : { type: "boolean" };
  }
  return { type: "object", properties, required: Object.keys(properties), additionalProperties: false };
}

/** Every number finite; every integer the schema asks for a safe integer. */
function numbersUsable(value: unknown, schema: Schema | undefined, at = "$"): string | null {
  if (typeof value === "number") {
    if (!Number.isFinite(value)) return `${at}: ${value} is not finite`;
    if (schema?.type === "integer" && !Number.isSafeInteger(value)) return `${at}: ${value} is not a safe integer`;
    return null;
  }
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) {
      const bad = numbersUsable(v, schema?.items, `${at}[${i}]`);
      if (bad) return bad;
    }
  } else if (value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      const bad = numbersUsable(v, schema?.properties?.[k], `${at}.${k}`);
      if (bad) return bad;
    }
  }
  return null;
}

interface Outcome {
  status: number;
  /** The JSON text the schema governs, when the answer ended on its own (stop / tool call / end_turn). */
  json: string | null;
  raw: string;
  /** What the answer must fit when that is not the schema sent (a tool's top-level shape, json_object); null: an object, nothing more. */
  fits?: Schema | null;
  /** The answer must be a JSON object (tool arguments, json_object). */
  object?: boolean;
}

type Way = { name: string; send(schema: Schema | null, seed: number): Promise<Outcome> };

/**
 * A tool's parameters as clients write their top level around `schema`: as is, empty, absent, in a
 * union with scalars, nullable, behind a $ref, or (non-strict only) a type that is not an object —
 * the arguments are an object every time (issue 42), fitting `fits` where the shape says more.
 */
function toolShape(schema: Schema, seed: number, strict: boolean): { parameters: Schema | undefined; fits: Schema | null } {
  const r = new Prng(seed);
  const shape = r.weighted([["as is", 6], ["empty", 1], ["absent", 1], ["union", 1], ["nullable", 1], ["ref", 1], ["scalar", strict ? 0 : 1]] as const);
  switch (shape) {
    case "as is":
      return { parameters: schema, fits: schema };
    case "empty":
      return { parameters: {}, fits: null };
    case "absent":
      return { parameters: undefined, fits: { type: "object", properties: {}, additionalProperties: false } };
    case "union":
      return { parameters: { anyOf: [{ type: "string" }, { type: "number" }, schema] }, fits: schema };
    case "nullable":
      return { parameters: { ...schema, nullable: true }, fits: schema };
    case "ref":
      return { parameters: { $ref: "#/$defs/Args", $defs: { Args: schema } }, fits: schema };
    case "scalar":
      return { parameters: { type: r.pick(["string", "number", "integer", "array", "null"]) }, fits: null };
  }
}

let base: string;
let key: string;
useDemoServer((s) => {
  key = s.key;
  base = s.server.url;
});

async function post(path: string, body: object) {
  const res = await fetch(`${base}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as any };
}

const ask = [{ role: "user", content: "Fill in the fields." }];
const NO_THINKING = { chat_template_kwargs: { enable_thinking: false } };

const WAYS: Way[] = [
  {
    name: "chat response_format json_schema",
    async send(schema, seed) {
      const { status, body } = await post("/v1/chat/completions", { model: "demo-chat", messages: ask, max_tokens: 160, seed, ...NO_THINKING, response_format: { type: "json_schema", json_schema: { name: "out", schema, strict: true } } });
      const c = body.choices?.[0];
      return { status, json: c?.finish_reason === "stop" ? c.message.content : null, raw: JSON.stringify(body).slice(0, 600) };
    },
  },
  {
    name: "chat response_format json_object with a schema",
    async send(schema, seed) {
      const { status, body } = await post("/v1/chat/completions", { model: "demo-chat", messages: ask, max_tokens: 160, seed, ...NO_THINKING, response_format: { type: "json_object", schema } });
      const c = body.choices?.[0];
      return { status, json: c?.finish_reason === "stop" ? c.message.content : null, raw: JSON.stringify(body).slice(0, 600) };
    },
  },
  {
    name: "chat response_format json_object",
    async send(_schema, seed) {
      const { status, body } = await post("/v1/chat/completions", { model: "demo-chat", messages: ask, max_tokens: 160, seed, ...NO_THINKING, response_format: { type: "json_object" } });
      const c = body.choices?.[0];
      return { status, json: c?.finish_reason === "stop" ? c.message.content : null, raw: JSON.stringify(body).slice(0, 600), fits: null, object: true };
    },
  },
  {
    name: "chat forced tool call (strict and not)",
    async send(schema, seed) {
      const strict = seed % 2 === 0;
      const { parameters, fits } = toolShape(schema ?? {}, seed, strict);
      const tool = { type: "function", function: { name: "fill", ...(parameters && { parameters }), strict } };
      const { status, body } = await post("/v1/chat/completions", { model: "demo-chat", messages: ask, max_tokens: 160, seed, ...NO_THINKING, tools: [tool], tool_choice: { type: "function", function: { name: "fill" } } });
      const c = body.choices?.[0];
      return { status, json: c?.finish_reason === "tool_calls" ? c.message.tool_calls[0].function.arguments : null, raw: JSON.stringify(body).slice(0, 600), fits, object: true };
    },
  },
  {
    name: "chat streamed response_format json_schema",
    async send(schema, seed) {
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "demo-chat", messages: ask, max_tokens: 160, seed, stream: true, ...NO_THINKING, response_format: { type: "json_schema", json_schema: { name: "out", schema, strict: true } } }),
      });
      const text = await res.text();
      let content = "";
      let finish: string | null = null;
      for (const line of text.split("\n")) {
        if (!line.startsWith("data: {")) continue;
        const c = JSON.parse(line.slice(6)).choices?.[0];
        content += c?.delta?.content ?? "";
        finish = c?.finish_reason ?? finish;
      }
      return { status: res.status, json: finish === "stop" ? content : null, raw: text.slice(0, 600) };
    },
  },
  {
    name: "responses text.format json_schema",
    async send(schema, seed) {
      const { status, body } = await post("/v1/responses", { model: "demo-chat", input: "Fill in the fields.", max_output_tokens: 160, temperature: seed % 3 === 0 ? 0 : 1, reasoning: { effort: "none" }, text: { format: { type: "json_schema", name: "out", schema, strict: true } } });
      const text = body.output?.find((o: any) => o.type === "message")?.content?.[0]?.text;
      return { status, json: body.status === "completed" ? text : null, raw: JSON.stringify(body).slice(0, 600) };
    },
  },
  {
    name: "responses text.format json_object (with a schema and without)",
    async send(schema, seed) {
      const format = seed % 2 ? { type: "json_object" } : { type: "json_object", schema };
      const { status, body } = await post("/v1/responses", { model: "demo-chat", input: "Fill in the fields.", max_output_tokens: 160, reasoning: { effort: "none" }, text: { format } });
      const text = body.output?.find((o: any) => o.type === "message")?.content?.[0]?.text;
      return { status, json: body.status === "completed" ? text : null, raw: JSON.stringify(body).slice(0, 600), fits: seed % 2 ? null : schema, object: true };
    },
  },
  {
    name: "responses forced function call (strict and not)",
    async send(schema, seed) {
      const strict = seed % 2 === 0;
      const { parameters, fits } = toolShape(schema ?? {}, seed, strict);
      const { status, body } = await post("/v1/responses", { model: "demo-chat", input: "Fill in the fields.", max_output_tokens: 160, reasoning: { effort: "none" }, tools: [{ type: "function", name: "fill", ...(parameters && { parameters }), strict }], tool_choice: { type: "function", name: "fill" } });
      const call = body.output?.find((o: any) => o.type === "function_call");
      return { status, json: body.status === "completed" && call ? call.arguments : null, raw: JSON.stringify(body).slice(0, 600), fits, object: true };
    },
  },
  {
    name: "messages output_config.format",
    async send(schema) {
      const { status, body } = await post("/v1/messages", { model: "demo-chat", max_tokens: 160, messages: ask, output_config: { format: { type: "json_schema", schema } } });
      const text = body.content?.find((b: any) => b.type === "text")?.text;
      return { status, json: body.stop_reason === "end_turn" ? text : null, raw: JSON.stringify(body).slice(0, 600) };
    },
  },
  {
    name: "messages forced tool_use",
    async send(schema, seed) {
      // input_schema is required on /v1/messages: every shape but an absent one
      const strict = seed % 2 === 0;
      const shaped = toolShape(schema ?? {}, seed, strict);
      const { parameters, fits } = shaped.parameters ? shaped : { parameters: {}, fits: null };
      const { status, body } = await post("/v1/messages", { model: "demo-chat", max_tokens: 160, messages: ask, tools: [{ name: "fill", input_schema: parameters, ...(strict && { strict }) }], tool_choice: { type: "tool", name: "fill" } });
      const use = body.content?.find((b: any) => b.type === "tool_use");
      return { status, json: body.stop_reason === "tool_use" ? JSON.stringify(use.input) : null, raw: JSON.stringify(body).slice(0, 600), fits, object: true };
    },
  },
];

test(`grammar fuzz: ${SECONDS} s of random schemas × seeds through ${WAYS.length} ways on the demo model (seed ${SEED})`, async () => {
  const r = new Prng(SEED);
  const bad: string[] = [];
  let sent = 0;
  let checked = 0;
  const perWay = new Map<string, number>(WAYS.map((w) => [w.name, 0]));
  const until = performance.now() + SECONDS * 1000;
  // Empty parameters and json_object first: the shapes the clients found, then random schemas.
  const fixed: (Schema | null)[] = [{}, { type: "object", properties: { n: { type: "number" }, i: { type: "integer" } }, required: ["n", "i"], additionalProperties: false }];
  while ((performance.now() < until || sent < WAYS.length) && bad.length < 3) {
    const schema = fixed.shift() ?? objectSchema(r, 0);
    const way = sent < WAYS.length ? WAYS[sent]! : r.pick(WAYS);
    const seed = r.int(1, 1_000_000);
    sent++;
    const o = await way.send(schema, seed);
    const at = `${way.name}, seed ${seed}, schema ${JSON.stringify(schema)}`;
    if (o.status !== 200) {
      bad.push(`${at}: HTTP ${o.status} ${o.raw}`);
      continue;
    }
    if (o.json === null) continue; // cut by max_tokens: incomplete JSON is the contract (spec §7.3)
    checked++;
    perWay.set(way.name, (perWay.get(way.name) ?? 0) + 1);
    let value: unknown;
    try {
      value = JSON.parse(o.json);
    } catch {
      bad.push(`${at}: not JSON: ${o.json.slice(0, 300)}`);
      continue;
    }
    const fits = o.fits === undefined ? schema : o.fits;
    const problem =
      (o.object && (typeof value !== "object" || value === null || Array.isArray(value)) ? `not an object: ${o.json.slice(0, 200)}` : null) ??
      numbersUsable(value, fits ?? undefined) ??
      (fits ? checkJsonSchema(value, fits) : null);
    if (problem) bad.push(`${at}: ${problem} in ${o.json.slice(0, 300)}`);
  }
  console.log(`grammar fuzz: ${sent} requests, ${checked} complete answers checked`, Object.fromEntries(perWay));
  expect(bad).toEqual([]);
  // every way answered some requests in full (a way whose answers were all cut would check nothing)
  if (bad.length === 0) for (const [name, n] of perWay) expect({ name, checked: n > 0 }).toEqual({ name, checked: true });
}, 240_000);
