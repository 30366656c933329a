import { afterAll, beforeAll, expect, test } from "bun:test";
import { Type as T } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { Elysia, t as et } from "elysia";
import { CountTokensRequest, MessagesRequest } from "../../src/1-api/anthropic/schema";
import { ApiError, ERROR_TABLE, toAnthropicErrorBody, toOpenAIErrorBody, type ErrorCode } from "../../src/1-api/http/errors";
import { CreateBatchRequest } from "../../src/1-api/openai/batches";
import { ChatRequest } from "../../src/2-services/chat/request";
import { ClassifyRequest } from "../../src/2-services/classify/request";
import { DecisionRequest } from "../../src/2-services/decisions/request";
import { RerankRequest } from "../../src/2-services/rerank/request";
import { EmbeddingsRequest } from "../../src/2-services/embeddings/request";
import { ImagesRequest } from "../../src/2-services/images/request";
import { buildOpenApi, HTTP_METHODS, openApiPath, routeKey, type OpenApiDocument, type Operation, type RouteLike } from "../../src/1-api/openapi/document";
import { AnthropicErrorBody, OpenAIErrorBody } from "../../src/1-api/openapi/hand-schemas";
import { OPERATIONS } from "../../src/1-api/openapi/operations";
import { REFERENCE_CSP } from "../../src/1-api/openapi/reference";
import { openapiRoutes, renderReference } from "../../src/1-api/openapi/routes";
import { accessOf } from "../../src/1-api/http/auth";
import { ResponsesRequest } from "../../src/1-api/responses/schema";
import { BASE, testApp, type TestApp } from "../helpers/app";
import { consoleAccount, consoleClient, type ConsoleClient } from "./console/client";

// The OpenAPI document against the real app: every route is documented and nothing else is;
// each documented body is the schema the route validates with, and the app agrees — a minimal
// example generated from the document passes validation, the same example without a required
// field is a 400 naming it. Routes that check their body by hand are held to their hand-written
// schema the same way.

type Json = Record<string, any>;

/**
 * The app's route table. createApp keeps its Elysia instance to itself, so the table is caught
 * while the app is composed: the root is the instance plugins are `.use`d into that is no plugin.
 */
function composeCapturingRoutes<T>(build: () => T): { value: T; routes: RouteLike[] } {
  const receivers = new Set<object>();
  const plugins = new Set<unknown>();
  const use = Elysia.prototype.use;
  Elysia.prototype.use = function (this: object, plugin: unknown) {
    receivers.add(this);
    plugins.add(plugin);
    return use.call(this, plugin as never);
  } as typeof use;
  try {
    const value = build();
    const roots = [...receivers].filter((r) => !plugins.has(r)) as Elysia[];
    if (roots.length !== 1) throw new Error(`expected one root Elysia instance, found ${roots.length}`);
    return { value, routes: roots[0]!.routes as RouteLike[] };
  } finally {
    Elysia.prototype.use = use;
  }
}

const { value: t, routes: allRoutes } = composeCapturingRoutes((): TestApp => testApp({ config: { rentals: { discover: false } } }));
// Routes of every method (`.all`) are pass-throughs, not API operations: the rental notebook proxy
// at /rentals/{id}/ forwards whatever the notebook serves. The document leaves them out; so do these checks.
const passThrough = allRoutes.filter((r) => !HTTP_METHODS.includes(r.method.toLowerCase() as (typeof HTTP_METHODS)[number]));
const routes = allRoutes.filter((r) => !passThrough.includes(r));
const doc = buildOpenApi({ routes: allRoutes });
/** True once src/app.ts mounts openapiRoutes; until then its two routes have entries but no route. */
const wired = routes.some((r) => r.path === "/openapi.json");
const UNMOUNTED = wired ? [] : ["GET /openapi.json", "GET /reference"];

let key: string;
let admin: ConsoleClient;
beforeAll(async () => {
  key = await t.key({ creditUsd: 5, scopes: ["inference", "rental"] });
  await consoleAccount(t, "root", { admin: true, creditUsd: 1 });
  admin = consoleClient(t);
  expect((await admin.signIn("root", "pw-root-0123456789")).status).toBe(200);
});
afterAll(() => t.close());

function operations(d: OpenApiDocument = doc): { method: string; path: string; op: Operation }[] {
  return Object.entries(d.paths).flatMap(([path, item]) => HTTP_METHODS.flatMap((m) => (item[m] ? [{ method: m.toUpperCase(), path, op: item[m]! }] : [])));
}

/** A schema with every `$ref` replaced by its component (cycles stay as refs). */
function deref(s: unknown, seen: string[] = []): any {
  if (Array.isArray(s)) return s.map((x) => deref(x, seen));
  if (s === null || typeof s !== "object") return s;
  const ref = (s as Json).$ref;
  if (typeof ref === "string") {
    const name = ref.replace("#/components/schemas/", "");
    if (seen.includes(name)) return s;
    return deref(doc.components.schemas[name], [...seen, name]);
  }
  return Object.fromEntries(Object.entries(s).map(([k, v]) => [k, deref(v, seen)]));
}

/** The smallest value a (dereferenced) schema allows: required properties only, first choices, least lengths. */
function exampleOf(s: Json): unknown {
  if ("const" in s) return s.const;
  if (Array.isArray(s.examples) && s.examples.length) return s.examples[0];
  if (s.default !== undefined) return s.default;
  if (Array.isArray(s.enum)) return s.enum[0];
  const variants: Json[] | undefined = s.anyOf ?? s.oneOf;
  if (variants) return exampleOf(variants.find((v) => v.type !== "null") ?? variants[0]!);
  const type = Array.isArray(s.type) ? (s.type.find((x: string) => x !== "null") ?? "null") : s.type;
  switch (type) {
    case "object":
      return Object.fromEntries(((s.required ?? []) as string[]).map((name) => [name, exampleOf(s.properties[name])]));
    case "array":
      return Array.from({ length: s.minItems ?? 0 }, () => exampleOf(s.items));
    case "string":
      return "a".repeat(Math.min(Math.max(s.minLength ?? 0, 1), s.maxLength ?? Infinity));
    case "integer":
    case "number":
      return s.minimum ?? (s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : 0);
    case "boolean":
      return false;
    default:
      return null;
  }
}

/** A request as its operation's security asks: a key, or the admin's console session. */
function send(op: Operation, method: string, path: string, init: { body?: BodyInit; type?: string } = {}): Promise<Response> {
  const url = path.replace(/\{([^}]+)\}/g, "a");
  if (op.security.some((s) => "consoleSession" in s)) return admin.call(method, url, init.body === undefined ? undefined : JSON.parse(init.body as string));
  const headers: Record<string, string> = { origin: BASE };
  if (op.security.length) headers.authorization = `Bearer ${key}`;
  if (init.type) headers["content-type"] = init.type;
  return t.app.handle(new Request(BASE + url, { method, headers, body: init.body }));
}

/** Elysia's (or a hand check's) field validation: 400 invalid_request (OpenAI code null). */
async function validationError(res: Response): Promise<{ param: string | null; message: string } | null> {
  if (res.status !== 400) return null;
  const body = (await res.json()) as Json;
  if (body.type === "error") return { param: null, message: body.error.message };
  return body.error.code === null ? { param: body.error.param, message: body.error.message } : null;
}

/**
 * A hook's schema as JSON, less the `additionalProperties: false` Elysia writes into it when the
 * route compiles (it strips undeclared fields rather than refusing them: src/1-api/openapi/schema.ts).
 */
function asValidated(schema: unknown): Json {
  return JSON.parse(JSON.stringify(schema), (k, v) => (v && typeof v === "object" && v.additionalProperties === false ? (({ additionalProperties: _, ...rest }) => rest)(v) : v));
}

const jsonBodies = () => operations().filter((o) => o.op.requestBody?.content["application/json"]);

test("every route of the app is an operation in the document, and every operation a route", () => {
  const fromTable = routes.map((r) => `${r.method.toUpperCase()} ${openApiPath(r.path, OPERATIONS[routeKey(r)]?.wildcard)}`);
  expect(new Set(fromTable).size).toBe(fromTable.length);
  const documented = operations().map((o) => `${o.method} ${o.path}`);
  expect(documented.sort()).toEqual(fromTable.sort());
  expect(fromTable.length).toBeGreaterThan(50);
});

test("the only pass-through routes are the rental notebook proxy's, and the document has none of them", () => {
  expect(passThrough.map(routeKey).sort()).toEqual(["ALL /rentals/:id", "ALL /rentals/:id/*"]);
  expect(Object.keys(doc.paths).some((p) => p.startsWith("/rentals/"))).toBe(false);
});

test("every route has its entry in operations.ts (id, summary, success answer), and no entry is stale", () => {
  expect(routes.map(routeKey).sort()).toEqual(Object.keys(OPERATIONS).filter((k) => !UNMOUNTED.includes(k)).sort());
  const ids = operations().map((o) => o.op.operationId);
  expect(new Set(ids).size).toBe(ids.length);
});

test("each documented JSON body and query is the very schema its route validates with", () => {
  const exported: Record<string, unknown> = {
    "POST /v1/chat/completions": ChatRequest,
    "POST /v1/responses": ResponsesRequest,
    "POST /v1/messages": MessagesRequest,
    "POST /v1/messages/count_tokens": CountTokensRequest,
    "POST /v1/embeddings": EmbeddingsRequest,
    "POST /v1/classify": ClassifyRequest,
    "POST /v1/decisions": DecisionRequest,
    "POST /v1/rerank": RerankRequest,
    "POST /v2/rerank": RerankRequest,
    "POST /v1/images/generations": ImagesRequest,
    "POST /v1/batches": CreateBatchRequest,
  };
  const withBody = routes.filter((r) => (r.hooks as Json | undefined)?.body);
  expect(withBody.map(routeKey).sort()).toEqual(Object.keys(exported).sort());
  for (const route of routes) {
    const hooks = (route.hooks ?? {}) as Json;
    const op = doc.paths[openApiPath(route.path, OPERATIONS[routeKey(route)]?.wildcard)]![route.method.toLowerCase() as "get"]!;
    if (hooks.body) {
      expect(hooks.body).toBe(exported[routeKey(route)]); // the exported value itself, not a copy
      const documented = deref(op.requestBody!.content["application/json"]!.schema);
      expect(documented).toEqual(asValidated(hooks.body));
    }
    if (hooks.query) {
      const q = asValidated(hooks.query);
      const params = (op.parameters ?? []).filter((p) => p.in === "query");
      expect(params.map((p) => p.name)).toEqual(Object.keys(q.properties));
      for (const p of params) {
        expect(deref(p.schema)).toEqual(q.properties[p.name]);
        expect(p.required).toBe((q.required ?? []).includes(p.name));
      }
    }
  }
});

test("a minimal example of each JSON body passes the route's validation", async () => {
  const ops = jsonBodies();
  expect(ops.length).toBe(19); // 11 schema hooks + 8 bodies checked by hand
  const refused: unknown[] = [];
  for (const { method, path, op } of ops) {
    const example = exampleOf(deref(op.requestBody!.content["application/json"]!.schema));
    const res = await send(op, method, path, { body: JSON.stringify(example), type: "application/json" });
    // Refused later for another reason (unknown model 404, no such node 404, wrong password 401…) is fine.
    const err = await validationError(res.clone());
    if (err || res.status >= 500) refused.push({ op: op.operationId, example, status: res.status, err });
  }
  expect(refused).toEqual([]);
});

test("the same example without a required field is 400 naming that field", async () => {
  const wrong: unknown[] = [];
  let checked = 0;
  for (const { method, path, op } of jsonBodies()) {
    const schema = deref(op.requestBody!.content["application/json"]!.schema);
    const example = exampleOf(schema) as Json;
    for (const field of (schema.required ?? []) as string[]) {
      const { [field]: _, ...rest } = example;
      const err = await validationError(await send(op, method, path, { body: JSON.stringify(rest), type: "application/json" }));
      // The Anthropic envelope has no `param`: its message starts with the field.
      const named = err?.param ?? err?.message.split(":")[0];
      if (named !== field) wrong.push({ op: op.operationId, field, err });
      checked++;
    }
  }
  expect(wrong).toEqual([]);
  expect(checked).toBeGreaterThan(20);
});

test("the document is the same once the routes have run (Elysia has compiled their validators)", () => {
  expect(buildOpenApi({ routes })).toEqual(doc);
});

test("the multipart upload takes the documented form and names a missing field", async () => {
  const { op } = operations().find((o) => o.op.operationId === "uploadFile")!;
  const schema = deref(op.requestBody!.content["multipart/form-data"]!.schema);
  const form = (omit?: string) => {
    const f = new FormData();
    for (const [name, prop] of Object.entries(schema.properties as Record<string, Json>)) {
      if (name === omit) continue;
      if (prop.contentMediaType) f.append(name, new Blob(['{"custom_id":"1"}\n']), "input.jsonl");
      else f.append(name, String(exampleOf(prop)));
    }
    return f;
  };
  const up = (f: FormData) => t.app.handle(new Request(`${BASE}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: f }));
  expect((await up(form())).status).toBe(200);
  for (const field of schema.required as string[]) expect((await validationError(await up(form(field))))?.param).toBe(field);
});

test("a route table with $id schemas, references, files and a wildcard maps onto components and templates", () => {
  const Part = T.Object({ text: T.String() }, { $id: "Part" });
  const app = new Elysia()
    .post("/things/:id", () => null, { body: T.Object({ parts: T.Array(Part), again: T.Ref("Part") }), params: T.Object({ id: T.String({ format: "uuid" }) }) })
    .post("/upload", () => null, { body: et.Object({ file: et.File(), note: et.Optional(et.String()) }) })
    .get("/blobs/*", () => null, { query: T.Object({ n: T.Integer() }) });
  const d = buildOpenApi(app);
  expect(validateOpenApi(d)).toEqual([]);
  expect(d.components.schemas.Part).toEqual({ type: "object", properties: { text: { type: "string" } }, required: ["text"] });
  const body = d.components.schemas.PostThingsIdRequest as Json;
  expect(body.properties.parts.items).toEqual({ $ref: "#/components/schemas/Part" });
  expect(body.properties.again).toEqual({ $ref: "#/components/schemas/Part" });
  expect(d.paths["/things/{id}"]!.post!.parameters).toEqual([{ name: "id", in: "path", required: true, schema: { type: "string", format: "uuid" } }]);
  expect(Object.keys(d.paths["/upload"]!.post!.requestBody!.content)).toEqual(["multipart/form-data"]);
  expect(d.paths["/blobs/{path}"]!.get!.parameters!.map((p) => [p.name, p.in, p.required])).toEqual([["path", "path", true], ["n", "query", true]]);
});

test("the document is structurally valid OpenAPI 3.1", () => {
  expect(validateOpenApi(doc)).toEqual([]);
  expect(JSON.parse(JSON.stringify(doc))).toEqual(doc); // plain JSON: no symbols, functions or undefined
});

test("the error envelopes documented are the ones rendered, for every error code", () => {
  for (const code of Object.keys(ERROR_TABLE) as ErrorCode[]) {
    const err = new ApiError(code, "m", { param: "x" });
    expect(Value.Check(OpenAIErrorBody, toOpenAIErrorBody(err))).toBe(true);
    expect(Value.Check(AnthropicErrorBody, toAnthropicErrorBody(err))).toBe(true);
  }
  expect(doc.paths["/v1/messages"]!.post!.responses["400"]!.content!["application/json"]!.schema).toEqual({ $ref: "#/components/schemas/AnthropicError" });
  expect(doc.paths["/v1/chat/completions"]!.post!.responses["400"]!.content!["application/json"]!.schema).toEqual({ $ref: "#/components/schemas/OpenAIError" });
});

test("auth is documented as the edge enforces it: every secured operation is 401 without credentials", async () => {
  const wrong: string[] = [];
  // Signing out ends the session the other calls use: last.
  const ops = operations().sort((a, b) => Number(a.op.operationId === "consoleLogout") - Number(b.op.operationId === "consoleLogout"));
  for (const { method, path, op } of ops) {
    const url = BASE + path.replace(/\{([^}]+)\}/g, "a");
    const bare = await t.app.handle(new Request(url, { method, headers: { origin: BASE } }));
    if ((bare.status === 401) !== op.security.length > 0) wrong.push(`${method} ${path}: ${bare.status} without credentials`);
    for (const req of op.security) {
      const [scheme] = Object.keys(req);
      const headers: Record<string, string> = { origin: BASE };
      if (scheme === "bearerAuth") headers.authorization = `Bearer ${key}`;
      if (scheme === "xApiKey") Object.assign(headers, { "x-api-key": key, "anthropic-version": "2023-06-01" });
      if (scheme === "consoleSession") Object.assign(headers, { cookie: admin.cookie!, "x-csrf-token": admin.csrf! });
      const res = await t.app.handle(new Request(url, { method, headers }));
      if (res.status === 401) wrong.push(`${method} ${path}: 401 with ${scheme}`);
    }
  }
  expect(wrong).toEqual([]);
  const security = (method: string, path: string) => (doc.paths[path] as Json)[method].security;
  expect(security("post", "/v1/chat/completions")).toEqual([{ bearerAuth: [] }]);
  expect(security("post", "/v1/messages")).toEqual([{ bearerAuth: [] }, { xApiKey: [] }]);
  expect(security("get", "/console/api/keys")).toEqual([{ consoleSession: [] }]);
  expect(security("post", "/console/api/login")).toEqual([]);
  expect((doc.paths["/console/api/keys"]!.post!.parameters ?? []).map((p) => p.name)).toContain("X-CSRF-Token");
});

test("every route that takes a key names the scope it needs: only the admin API, /metrics and the API's description take any scope", () => {
  // (/v2/rerank once took a key of any scope and skipped the rpm count that comes with a scope)
  const anyScope = new Set(["/metrics", "/openapi.json", "/reference"]);
  const unscoped = routes.map((r) => r.path).filter((path) => {
    const access = accessOf(path);
    return access.key && access.scope === null && !path.startsWith("/api/v1/admin/") && !anyScope.has(path);
  });
  expect([...new Set(unscoped)]).toEqual([]);
  expect(accessOf("/v2/rerank")).toEqual({ key: true, scope: "inference" });
});

test("every console route refuses a host name this machine does not answer to (DNS rebinding), whoever composed it", async () => {
  // (the console's chat route, a plugin of its own, once answered any Host: each plugin repeated the check)
  const consoleRoutes = routes.filter((r) => r.path === "/" || r.path === "/console" || r.path.startsWith("/console/"));
  expect(consoleRoutes.length).toBeGreaterThan(20);
  const answered: string[] = [];
  for (const r of consoleRoutes) {
    const path = r.path.replace(/:[a-z_]+/gi, "x").replace("*", "chat/completions");
    const headers: Record<string, string> = { host: "evil.example", origin: "http://evil.example", "content-type": "application/json", cookie: `appliance_session=${admin.cookie?.split("=")[1] ?? ""}`, "x-csrf-token": admin.csrf ?? "" };
    const res = await t.app.handle(new Request(`http://evil.example${path}`, { method: r.method, headers, body: ["GET", "HEAD"].includes(r.method) ? undefined : "{}" }));
    const code = res.status === 403 ? ((await res.json()) as Json).error?.code : null;
    if (code !== "csrf_failed") answered.push(`${r.method} ${r.path}: ${res.status}`);
  }
  expect(answered).toEqual([]);
});

test("the reference page lists every operation, with no script and only its hashed inline style", () => {
  const html = renderReference(doc);
  for (const { method, path, op } of operations()) {
    expect(html).toContain(`id="${op.operationId}"`);
    expect(html).toContain(`<span class="method ${method.toLowerCase()}">${method}</span><code>${path}</code>`);
  }
  expect(html).not.toContain("<script");
  expect(html).not.toMatch(/\son[a-z]+=/i); // no inline handlers
  expect(html).not.toMatch(/(src|href)="(https?:)?\/\//); // no external asset
  const style = /<style>([\s\S]*?)<\/style>/.exec(html)![1]!;
  expect(REFERENCE_CSP).toContain(`'sha256-${new Bun.CryptoHasher("sha256").update(style).digest("base64")}'`);
  expect(REFERENCE_CSP).not.toContain("script-src");
  expect(html).toContain("<code>messages</code>"); // bodies are rendered as nested lists
});

test("openapiRoutes serves the document once built, and the page under a strict CSP", async () => {
  let builds = 0;
  const plugin = new Elysia().use(openapiRoutes(() => (builds++, doc)));
  const first = await plugin.handle(new Request(`${BASE}/openapi.json`));
  expect(first.headers.get("content-type")).toBe("application/json");
  expect(await first.json()).toEqual(doc);
  const page = await plugin.handle(new Request(`${BASE}/reference`));
  expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
  expect(page.headers.get("content-security-policy")).toBe(REFERENCE_CSP);
  expect(await page.text()).toBe(renderReference(doc));
  await plugin.handle(new Request(`${BASE}/openapi.json`));
  expect(builds).toBe(1);
});

test.skipIf(!wired)("the app serves its own document at /openapi.json to a key, and nothing without one", async () => {
  const res = await t.request("GET", "/openapi.json", { key });
  expect(res.status).toBe(200);
  expect(await res.json()).toEqual(JSON.parse(JSON.stringify(doc)));
  expect((await t.request("GET", "/openapi.json")).status).toBe(401);
  expect((await t.request("GET", "/reference")).status).toBe(401);
});

/** A structural check of an OpenAPI 3.1 document: what the tools that read it rely on. */
function validateOpenApi(d: OpenApiDocument): string[] {
  const problems: string[] = [];
  const doc = d as unknown as Json;
  if (typeof doc.openapi !== "string" || !/^3\.1\.\d+$/.test(doc.openapi)) problems.push("openapi must be 3.1.x");
  if (typeof doc.info?.title !== "string" || typeof doc.info?.version !== "string") problems.push("info needs title and version");
  if (!doc.paths || typeof doc.paths !== "object") problems.push("paths must be an object");
  const tags = new Set((doc.tags ?? []).map((t: Json) => t.name));
  const schemes = doc.components?.securitySchemes ?? {};
  for (const [name, s] of Object.entries(schemes as Record<string, Json>)) {
    if (!["apiKey", "http", "mutualTLS", "oauth2", "openIdConnect"].includes(s.type)) problems.push(`securityScheme ${name}: bad type`);
    if (s.type === "apiKey" && (!s.name || !["query", "header", "cookie"].includes(s.in))) problems.push(`securityScheme ${name}: apiKey needs name and in`);
    if (s.type === "http" && !s.scheme) problems.push(`securityScheme ${name}: http needs scheme`);
  }
  for (const [path, item] of Object.entries((doc.paths ?? {}) as Record<string, Json>)) {
    if (!path.startsWith("/")) problems.push(`${path}: must start with /`);
    const templated = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
    for (const [method, op] of Object.entries(item)) {
      const where = `${method} ${path}`;
      if (!(HTTP_METHODS as readonly string[]).includes(method)) problems.push(`${where}: unknown method`);
      if (typeof op.operationId !== "string") problems.push(`${where}: no operationId`);
      for (const tag of op.tags ?? []) if (!tags.has(tag)) problems.push(`${where}: undeclared tag ${tag}`);
      for (const req of op.security ?? []) for (const name of Object.keys(req)) if (!schemes[name]) problems.push(`${where}: unknown security scheme ${name}`);
      const params: Json[] = op.parameters ?? [];
      const seen = new Set<string>();
      for (const p of params) {
        if (!["path", "query", "header", "cookie"].includes(p.in) || typeof p.name !== "string") problems.push(`${where}: bad parameter`);
        if (seen.has(`${p.in}:${p.name}`)) problems.push(`${where}: duplicate parameter ${p.name}`);
        seen.add(`${p.in}:${p.name}`);
        if (!p.schema === !p.content) problems.push(`${where}: parameter ${p.name} needs schema or content`);
        if (p.in === "path" && (p.required !== true || !templated.includes(p.name))) problems.push(`${where}: path parameter ${p.name} not required or not in the path`);
      }
      for (const name of templated) if (!params.some((p) => p.in === "path" && p.name === name)) problems.push(`${where}: {${name}} has no parameter`);
      if (op.requestBody && (!op.requestBody.content || !Object.keys(op.requestBody.content).length)) problems.push(`${where}: requestBody without content`);
      const responses = Object.entries((op.responses ?? {}) as Record<string, Json>);
      if (!responses.length) problems.push(`${where}: no responses`);
      for (const [status, r] of responses) {
        if (!/^([1-5](\d\d|XX)|default)$/.test(status)) problems.push(`${where}: bad status ${status}`);
        if (typeof r.description !== "string") problems.push(`${where} ${status}: no description`);
      }
    }
  }
  const ids = Object.values((doc.paths ?? {}) as Record<string, Json>).flatMap((item) => Object.values(item).map((op: Json) => op.operationId));
  if (new Set(ids).size !== ids.length) problems.push("operationIds are not unique");
  // Every $ref resolves: walk the whole document.
  const walk = (v: unknown, at: string) => {
    if (Array.isArray(v)) return v.forEach((x, i) => walk(x, `${at}/${i}`));
    if (v === null || typeof v !== "object") return;
    for (const [k, x] of Object.entries(v)) {
      if (k === "$ref") {
        const target = typeof x === "string" && x.startsWith("#/") ? x.slice(2).split("/").reduce<any>((o, seg) => o?.[seg.replace(/~1/g, "/").replace(/~0/g, "~")], doc) : undefined;
        if (target === undefined) problems.push(`${at}: unresolved $ref ${String(x)}`);
      } else walk(x, `${at}/${k}`);
    }
  };
  walk(doc, "#");
  return problems;
}
