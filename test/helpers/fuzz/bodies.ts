import type { FuzzWorld } from "./operations";
import { modelKindOf } from "./operations";
import type { Prng } from "./prng";
import type { Hint, JsonSchema } from "./schema";
import { hostileString, PROTOTYPE_KEYS } from "./values";

// What makes a generated body reach past validation into the service, and keeps it cheap there:
// real model ids and resource ids, small token and step budgets, JSON Schemas for tools and
// structured output, image URLs that are never fetched from the network. Multipart uploads for
// POST /v1/files are written by hand, so broken ones can be written too.

/** Top-level fields that bound the work a valid request does (see mutate's `protect`). */
export const BUDGET_FIELDS = new Set(["max_tokens", "max_completion_tokens", "max_output_tokens", "n", "steps", "size", "budget_tokens", "thinking"]);

const SCHEMAS: unknown[] = [
  { type: "object", properties: { a: { type: "string" } } },
  { type: "object", properties: { n: { type: "integer", minimum: 0, maximum: 10 } }, required: ["n"] },
  // JSON.parse makes "__proto__" an own field (an object literal would set the prototype instead).
  JSON.parse('{"type":"object","properties":{"__proto__":{"type":"string"},"toString":{"type":"number"}},"required":["toString","__proto__"]}'),
  { type: "object", properties: { constructor: { type: "object", properties: { prototype: { type: "string" } } } } },
  { type: "object", properties: { e: { enum: ["a", 1, null, true] } } },
  { type: "object", properties: { l: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 3 } } },
  { type: "object", properties: { u: { anyOf: [{ type: "string" }, { type: "null" }] } } },
  { type: "object", properties: { r: { $ref: "#/$defs/r" } }, $defs: { r: { type: "object", properties: { r: { $ref: "#/$defs/r" } } } } },
  { type: "object", properties: { x: { $ref: "#/nowhere" } } },
  { type: "object", additionalProperties: { type: "integer" } },
  { type: "object", patternProperties: { "^a": { type: "string" } } },
  { type: "string", pattern: "^(a+)+$" },
  { type: "array" },
  { type: ["object", "null"] },
  { type: "object", properties: { s: { type: "string", format: "date-time", minLength: 3, maxLength: 5 } } },
  { not: {} },
  { allOf: [{ type: "object" }, { type: "array" }] },
  {},
  { type: "nonsense" },
  { type: "object", properties: { d: { type: "number", multipleOf: 0 } } },
];

const IMAGE_URLS = [
  "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
  "data:image/png;base64,AAAA",
  "data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=",
  "data:;base64,%%%",
  "http://127.0.0.1:1/x.png",
  "http://[::ffff:127.0.0.1]:1/x.png",
  "http://[::ffff:7f00:1]:1/x.png",
  "http://169.254.169.254/latest/meta-data",
  "http://localhost:1/x.png",
  "file:///etc/passwd",
  "ftp://127.0.0.1/x.png",
  "not a url",
  "http://%ff/",
  "https://[::1]:1/x.png",
];

const TOOL = { type: "function", function: { name: "get_weather", description: "weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };

/** Well-formed values of the fields a route cannot do without, so many requests get past validation. */
function canonical(template: string, field: string | number | undefined, r: Prng): unknown {
  const say = () => `say ${r.word()} ${r.word()}`;
  if (template === "/v1/chat/completions") {
    if (field === "messages")
      return r.pick<() => unknown>([
        () => [{ role: "user", content: say() }],
        () => [{ role: "system", content: say() }, { role: "user", content: [{ type: "text", text: say() }] }],
        () => [{ role: "user", content: say() }, { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"x"}' } }] }, { role: "tool", tool_call_id: "call_1", content: "sunny" }],
        () => [{ role: "user", content: [{ type: "image_url", image_url: { url: r.pick(IMAGE_URLS) } }, { type: "text", text: say() }] }],
      ])();
    if (field === "tools") return [TOOL];
  }
  if (template.startsWith("/v1/messages")) {
    if (field === "messages")
      return r.pick<() => unknown>([
        () => [{ role: "user", content: say() }],
        () => [{ role: "user", content: [{ type: "text", text: say() }] }],
        () => [{ role: "user", content: say() }, { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "x" } }] }, { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny" }] }],
        () => [{ role: "user", content: [{ type: "image", source: { type: r.pick(["base64", "url"]), media_type: "image/png", data: "iVBORw0KGgo=", url: r.pick(IMAGE_URLS) } }] }],
      ])();
    if (field === "tools") return [{ name: "get_weather", description: "weather", input_schema: TOOL.function.parameters }];
  }
  if (template === "/v1/responses") {
    if (field === "input")
      return r.pick<() => unknown>([
        () => say(),
        () => [{ role: "user", content: say() }],
        () => [{ type: "message", role: "user", content: [{ type: "input_text", text: say() }] }],
        () => [{ type: "function_call", call_id: "c1", name: "get_weather", arguments: "{}" }, { type: "function_call_output", call_id: "c1", output: "sunny" }],
        () => [{ role: "user", content: [{ type: "input_image", image_url: r.pick(IMAGE_URLS) }] }],
      ])();
    if (field === "tools") return [{ type: "function", name: "get_weather", parameters: TOOL.function.parameters }];
  }
  if (template === "/v1/embeddings" && field === "input") return r.pick([say(), [say(), say()], [[1, 2, 3]]]);
  if (template === "/v1/classify" && field === "pairs") return [{ premise: say(), hypothesis: say() }];
  if (template === "/v1/images/generations" && field === "prompt") return say();
  return undefined;
}

/** Hints for one operation's body: model ids of the route's kind, small budgets, real ids. */
export function bodyHint(template: string, world: FuzzWorld, r: Prng): Hint {
  const kind = modelKindOf(template);
  return (path, schema: JsonSchema) => {
    const last = path[path.length - 1];
    const top = path.length === 1;
    if (top && r.chance(0.6)) {
      const v = canonical(template, last, r);
      if (v !== undefined) return structuredClone(v); // mutations change values in place
    }
    if (top && last === "model") {
      const other = Object.values(world.models).flat();
      return r.weighted<() => string>([
        [() => r.pick(kind ? world.models[kind] : other), 8],
        [() => r.pick(other), 1],
        [() => r.pick(world.models.retired), 0.5],
        [() => `no-such-${r.word()}`, 0.5],
      ])();
    }
    if (top && (last === "max_tokens" || last === "max_completion_tokens" || last === "max_output_tokens")) return r.int(1, 8);
    if (last === "budget_tokens") return r.int(1, 8);
    if (top && last === "n") return 1;
    if (top && last === "steps") return r.int(1, 2);
    if (top && last === "size") return r.pick(["256x256", "256x256", null, "auto", "255x256", "1x1", "0x0", "99999x99999", "256X256", "-256x256"]);
    if (top && last === "input_file_id") return r.chance(0.8) ? r.pick(world.ids.file) : `file-${r.word()}`;
    if (top && last === "endpoint") return r.pick(["/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/messages", "/v1/chat/completions/", "/V1/EMBEDDINGS", ""]);
    if (top && last === "completion_window") return r.chance(0.8) ? "24h" : r.pick(["1h", "", "24H", "48h"]);
    if (top && last === "node_id") return r.chance(0.8) ? r.pick(world.ids.node) : r.pick(["", "node-x", "%ff", "__proto__"]);
    if (top && last === "hours") return r.pick([0.01, 0.5, 1, 720, 721, 1e-9, null]);
    if (top && last === "account" && template === "/console/api/login") return r.chance(0.7) ? world.loginAccount : r.pick([r.word(), "admin", "__proto__", "", "x".repeat(65)]);
    if (top && last === "password") return r.chance(0.8) ? `pw-${r.word(8, 16)}` : hostileString(r);
    if (top && last === "usd") return r.pick([0.01, 1, 1e6, 1e6 + 1, 0, -1, 1e-9]);
    if (last === "url" || last === "image_url") return typeof schema.type === "string" && schema.type !== "string" ? undefined : r.pick(IMAGE_URLS);
    if (last === "parameters" || last === "schema" || last === "input_schema") return structuredClone(r.pick(SCHEMAS));
    if (last === "data" && path.includes("source")) return r.pick(["iVBORw0KGgo=", "AAAA", "%%%", ""]);
    if (last === "media_type") return r.pick(["image/png", "image/jpeg", "text/plain", "", "image/png; x=%ff"]);
    if (last === "text" || last === "content" || last === "premise" || last === "hypothesis" || last === "prompt" || last === "instructions")
      return typeof schema.type === "string" && schema.type !== "string" ? undefined : r.chance(0.85) ? `say ${r.word()} ${r.word()}` : hostileString(r);
    return undefined;
  };
}

// ---- multipart ---------------------------------------------------------------------------------

const BATCH_LINE = (id: string, model: string) =>
  JSON.stringify({ custom_id: id, method: "POST", url: "/v1/chat/completions", body: { model, messages: [{ role: "user", content: "hi" }], max_tokens: 4 } });

export interface Multipart {
  body: string;
  contentType: string;
  what: string;
}

/** A POST /v1/files body: a good upload, or one of the ways an upload can be wrong. */
export function multipartBody(r: Prng, world: FuzzWorld, valid: boolean): Multipart {
  const boundary = `----fuzz${r.word(8, 16)}`;
  const model = r.pick(world.models.chat);
  const goodFile = [BATCH_LINE("a", model), BATCH_LINE("b", model)].join("\n") + "\n";
  const part = (name: string, value: string, filename?: string, type?: string) =>
    `--${boundary}\r\nContent-Disposition: form-data; name="${name}"${filename === undefined ? "" : `; filename="${filename}"`}\r\n` +
    (type ? `Content-Type: ${type}\r\n` : "") + `\r\n${value}\r\n`;
  const end = `--${boundary}--\r\n`;
  const ct = `multipart/form-data; boundary=${boundary}`;
  if (valid) return { body: part("purpose", "batch") + part("file", goodFile, "in.jsonl", "application/jsonl") + end, contentType: ct, what: "good upload" };
  const fileLines = r.pick<() => string>([
    () => goodFile,
    () => "",
    () => "not json\n",
    () => "{}\n[]\nnull\n",
    () => `{"custom_id":"p","method":"POST","url":"/v1/chat/completions","body":{"__proto__":{"model":"x"},"toString":1,"model":${JSON.stringify(model)},"messages":[{"role":"user","content":"x","constructor":1}]}}\n`,
    () => `{"custom_id":"d","method":"POST","url":"/v1/chat/completions","body":${"[".repeat(5000)}${"]".repeat(5000)}}\n`,
    () => BATCH_LINE("dup", model) + "\n" + BATCH_LINE("dup", model) + "\n",
    () => BATCH_LINE("a", model).replace("/v1/chat/completions", r.pick(["/v1/files", "/V1/CHAT/COMPLETIONS", "/v1/chat/completions/", "%ff"])) + "\n",
    () => "\ufeff" + goodFile,
    () => goodFile.replace(/\n/g, "\r\n"),
    () => "\u0000\u0001\u0002binary\xff\xfe",
  ])();
  const variants: [string, () => string, string?][] = [
    ["lines", () => part("purpose", "batch") + part("file", fileLines, "in.jsonl") + end],
    ["wrong purpose", () => part("purpose", r.pick(["fine-tune", "", "BATCH", "__proto__", "batch\u0000"])) + part("file", goodFile, "in.jsonl") + end],
    ["no purpose", () => part("file", goodFile, "in.jsonl") + end],
    ["no file", () => part("purpose", "batch") + end],
    ["two files", () => part("purpose", "batch") + part("file", goodFile, "a.jsonl") + part("file", goodFile, "b.jsonl") + end],
    ["file as a field", () => part("purpose", "batch") + part("file", goodFile) + end],
    ["odd filename", () => part("purpose", "batch") + part("file", goodFile, r.pick(["", "../../etc/passwd", "%ff", "a\"b", "x".repeat(5000), "😀.jsonl", "a\r\nX-Evil: 1"])) + end],
    ["prototype field names", () => part(r.pick(PROTOTYPE_KEYS), "1") + part("purpose", "batch") + part("file", goodFile, "in.jsonl") + end],
    ["no closing boundary", () => part("purpose", "batch") + part("file", goodFile, "in.jsonl")],
    ["truncated", () => (part("purpose", "batch") + part("file", goodFile, "in.jsonl") + end).slice(0, r.int(1, 80))],
    ["no headers end", () => `--${boundary}\r\nContent-Disposition: form-data; name="file"\r\n` + "x".repeat(r.int(10, 20_000))],
    ["empty body", () => ""],
    ["no boundary in body", () => "just text"],
    ["broken disposition", () => `--${boundary}\r\nContent-Disposition: form-data; name=\r\n\r\nx\r\n` + end],
    ["wrong boundary", () => part("purpose", "batch").replace(boundary, "other") + end, ct],
    ["no boundary parameter", () => part("purpose", "batch") + end, "multipart/form-data"],
    ["quoted boundary", () => part("purpose", "batch") + part("file", goodFile, "in.jsonl") + end, `multipart/form-data; boundary="${boundary}"`],
    ["json instead", () => JSON.stringify({ purpose: "batch", file: goodFile }), "application/json"],
  ];
  const [what, make, type] = r.pick(variants);
  return { body: make(), contentType: type ?? ct, what: `upload: ${what}` };
}
