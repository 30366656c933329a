import { afterAll, describe, expect, test } from "bun:test";
import { Type as T, type TSchema } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { CountTokensRequest, MessagesRequest } from "../../../src/1-api/anthropic/schema";
import { CreateBatchRequest } from "../../../src/1-api/openai/batches";
import { ChatRequest } from "../../../src/2-services/chat/request";
import { DecisionRequest } from "../../../src/2-services/decisions/request";
import { RerankRequest } from "../../../src/2-services/rerank/request";
import { ClassifyRequest } from "../../../src/2-services/classify/request";
import { EmbeddingsRequest } from "../../../src/2-services/embeddings/request";
import { ImagesRequest } from "../../../src/2-services/images/request";
import { describeFirstError } from "../../../src/1-api/http/validation";
import { ResponsesRequest } from "../../../src/1-api/responses/schema";
import { decodeImages, type ImageInputOptions } from "../../../src/3-engines/image-input";
import type { ChatJob } from "../../../src/3-engines/chat-job";
import { testApp } from "../../helpers/app";

// Error texts that say what is expected (issue 41): a field declared as a union (most OpenAI fields
// are "X or null") failed with TypeBox's "expected union value", which names nothing a client can
// act on (`steps`, `seed` on /v1/images/generations). Every union field of every route's body is
// swept here with a value none of its variants accepts; a table pins the wording.

const t = testApp();
const key = await t.key({ scopes: ["inference"] });
afterAll(() => t.close());

const post = async (path: string, body: unknown) => {
  const res = await t.request("POST", path, { key, body, headers: path.startsWith("/v1/messages") ? { "anthropic-version": "2023-06-01" } : {} });
  return { status: res.status, error: ((await res.json()) as any).error as { message: string; param?: string | null } };
};

const ROUTES: { path: string; schema: TSchema; valid: Record<string, unknown> }[] = [
  { path: "/v1/chat/completions", schema: ChatRequest, valid: { model: "m", messages: [{ role: "user", content: "hi" }] } },
  { path: "/v1/images/generations", schema: ImagesRequest, valid: { model: "m", prompt: "a cat" } },
  { path: "/v1/embeddings", schema: EmbeddingsRequest, valid: { model: "m", input: "hi" } },
  { path: "/v1/classify", schema: ClassifyRequest, valid: { model: "m", input: ["hi"] } },
  { path: "/v1/decisions", schema: DecisionRequest, valid: { model: "m", input: "hi", questions: [{ type: "predicate", instructions: "x" }] } },
  { path: "/v1/rerank", schema: RerankRequest, valid: { model: "m", query: "q", documents: ["d"] } },
  { path: "/v2/rerank", schema: RerankRequest, valid: { model: "m", query: "q", documents: ["d"] } },
  { path: "/v1/messages", schema: MessagesRequest, valid: { model: "m", max_tokens: 5, messages: [{ role: "user", content: "hi" }] } },
  { path: "/v1/messages/count_tokens", schema: CountTokensRequest, valid: { model: "m", messages: [{ role: "user", content: "hi" }] } },
  { path: "/v1/responses", schema: ResponsesRequest, valid: { model: "m", input: "hi" } },
  { path: "/v1/batches", schema: CreateBatchRequest, valid: { input_file_id: "file-x", endpoint: "/v1/chat/completions", completion_window: "24h" } },
];

/** Values tried in turn until one fails every variant of a union. */
const WRONG: unknown[] = [{ "not-a-field": { nested: true } }, "not-valid-zz", 12345.5, true, [{}], -1];

const unionFields = (schema: TSchema) =>
  Object.entries((schema as unknown as { properties: Record<string, TSchema & { anyOf?: unknown[] }> }).properties).filter(([, s]) => Array.isArray(s.anyOf));

describe("every union field of every route says what it expects", () => {
  for (const route of ROUTES) {
    test(route.path, async () => {
      const fields = unionFields(route.schema); // none yet on /v1/classify: the sweep covers one added later
      for (const [name, schema] of fields) {
        const wrong = WRONG.find((v) => !Value.Check(schema, v));
        if (wrong === undefined) continue; // a union that takes anything
        const { status, error } = await post(route.path, { ...route.valid, [name]: wrong });
        const seen = { field: name, wrong, status, message: error.message };
        // Elysia makes an object of a scalar sent for an object field (its normalisation): no refusal to read.
        if (status !== 400 && typeof wrong !== "object" && JSON.stringify(schema).includes('"type":"object"')) continue;
        expect(seen).toMatchObject({ status: 400 });
        expect(seen.message).not.toMatch(/union/i);
        expect(seen.message).toStartWith(name);
        expect(seen.message).toMatch(/: (must be|is required|expected|unknown field)/);
      }
    });
  }
});

test.each([
  { path: "/v1/images/generations", body: { steps: 99 }, param: "steps", message: "steps: must be an integer from 1 to 50 or null" },
  { path: "/v1/images/generations", body: { steps: "ten" }, param: "steps", message: "steps: must be an integer from 1 to 50 or null" },
  { path: "/v1/images/generations", body: { seed: -1 }, param: "seed", message: "seed: must be an integer from 0 to 4294967295 or null" },
  { path: "/v1/images/generations", body: { n: 5 }, param: "n", message: "n: must be an integer from 1 to 4 or null" },
  { path: "/v1/chat/completions", body: { temperature: 3 }, param: "temperature", message: "temperature: must be a number from 0 to 2 or null" },
  { path: "/v1/chat/completions", body: { max_tokens: 0 }, param: "max_tokens", message: "max_tokens: must be an integer of at least 1 or null" },
  { path: "/v1/chat/completions", body: { stop: 5 }, param: "stop", message: "stop: must be a string, an array of at most 16 strings or null" },
  // A value that took a variant is reported inside it.
  { path: "/v1/chat/completions", body: { stop: ["a", 5] }, param: "stop[1]", message: "stop[1]: expected string" },
  { path: "/v1/chat/completions", body: { stream_options: { include_usage: "yes" } }, param: "stream_options.include_usage", message: "stream_options.include_usage: expected boolean" },
  { path: "/v1/chat/completions", body: { messages: [{ role: "user", content: 5 }] }, param: "messages[0].content", message: "messages[0].content: must be a string, an array or null" },
  { path: "/v1/chat/completions", body: { tool_choice: 5 }, param: "tool_choice", message: "tool_choice: must be a string, an object or null" },
  { path: "/v1/responses", body: { input: 5 }, param: "input", message: "input: must be a string or an array" },
  { path: "/v1/responses", body: { input: [{ role: "robot", content: "hi" }] }, param: "input[0].role", message: 'input[0].role: must be one of "user", "assistant", "system", "developer"' },
  // Anthropic's envelope has no param: the message names the field.
  { path: "/v1/messages", body: { system: 5 }, param: undefined, message: "system: must be a string or an array" },
  { path: "/v1/messages", body: { temperature: 1.5 }, param: undefined, message: "temperature: must be a number from 0 to 1 or null" },
  { path: "/v1/embeddings", body: { encoding_format: "hex" }, param: "encoding_format", message: 'encoding_format: must be one of "float", "base64"' },
])("$path → $message", async ({ path, body, param, message }) => {
  const route = ROUTES.find((r) => r.path === path)!;
  const { status, error } = await post(path, { ...route.valid, ...body });
  expect(status).toBe(400);
  expect(error).toMatchObject(param === undefined ? { message } : { param, message });
});

test.each([
  {
    name: "a union of objects told apart by type: the variant the value names",
    schema: T.Object({ part: T.Union([T.Object({ type: T.Literal("text"), text: T.String() }), T.Object({ type: T.Literal("image"), url: T.String() })]) }),
    value: { part: { type: "image" } },
    expected: { param: "part.url", message: "part.url: is required" },
  },
  {
    name: "a type no variant has: the types there are",
    schema: T.Object({ part: T.Union([T.Object({ type: T.Literal("text"), text: T.String() }), T.Object({ type: T.Literal("image"), url: T.String() })]) }),
    value: { part: { type: "video" } },
    expected: { param: "part.type", message: 'part.type: must be one of "text", "image"' },
  },
  {
    name: "exclusive bounds and string lengths in words",
    schema: T.Object({ x: T.Union([T.Number({ exclusiveMinimum: 0, maximum: 2 }), T.String({ minLength: 1 }), T.String({ maxLength: 8 }), T.Boolean()]) }),
    value: { x: [] },
    expected: { param: "x", message: "x: must be a number greater than 0 and at most 2, a non-empty string, a string of at most 8 characters or true or false" },
  },
  {
    name: "an array of items that are no union",
    schema: T.Object({ ids: T.Union([T.Array(T.Integer()), T.Null()]) }),
    value: { ids: "1,2" },
    expected: { param: "ids", message: "ids: must be an array of integers or null" },
  },
])("$name", ({ schema, value, expected }) => {
  expect(describeFirstError([...Value.Errors(schema, value)] as never)).toEqual(expected);
});

describe("an image URL's error says which URLs this server takes (image_input.allow_http_urls)", () => {
  const job = (url: string): ChatJob =>
    ({ model: "m", turns: [{ role: "user", text: "what is it", images: [{ url, param: "messages[0].content[1]", at: 0 }] }], tools: [], toolChoice: "auto", parallelToolCalls: true, format: null, thinking: null, maxTokens: null, stop: [], sampling: {}, stream: false, includeUsage: false }) as ChatJob;
  const options = (allow_http_urls: boolean): ImageInputOptions => ({ allow_private_urls: false, allow_http_urls, fetch_timeout_s: 2, max_bytes: 1 << 20, max_side: 2048 });
  const refusal = (url: string, http: boolean) => decodeImages(job(url), options(http)).then(() => "accepted", (e: Error) => e.message);

  test.each([
    { url: "cat.png", http: false, message: "messages[0].content[1]: the image URL must be https:// or a base64 data URL (it does not parse as a URL)" },
    { url: "cat.png", http: true, message: "messages[0].content[1]: the image URL must be https://, http:// or a base64 data URL (it does not parse as a URL)" },
    { url: "ftp://example.org/cat.png", http: false, message: "messages[0].content[1]: the image URL must be https:// or a base64 data URL (got ftp://)" },
    { url: "ftp://example.org/cat.png", http: true, message: "messages[0].content[1]: the image URL must be https://, http:// or a base64 data URL (got ftp://)" },
  ])("$url, http allowed: $http", async ({ url, http, message }) => {
    expect(await refusal(url, http)).toBe(message);
  });
});
