import { Kind } from "@sinclair/typebox";
import { VERSION } from "../../lib/version";
import { SESSION_COOKIE } from "../../2-services/console/auth";
import { accessOf } from "../http/auth";
import { ERROR_TABLE } from "../http/errors";
import { AnthropicErrorBody, OpenAIErrorBody } from "./hand-schemas";
import { CSRF_HEADER, needsCsrf, OPERATIONS, PathString, TAGS, tagOf, type OperationDoc } from "./operations";
import { SchemaComponents, SCHEMA_REF, type JsonSchema } from "./schema";

// The OpenAPI 3.1 document, generated from the composed app's route table: every route is an
// operation, and its body, query, params and headers schemas are the very TypeBox values its
// Elysia hooks validate with (STYLE "Schemas are declared once"). operations.ts adds what the
// table cannot say (ids, summaries, success answers, the inputs some routes check by hand).

/** One entry of Elysia's route table (`app.routes`): the hooks hold the route's schemas. */
export interface RouteLike {
  method: string;
  path: string;
  hooks?: unknown;
}

interface Hooks {
  body?: unknown;
  query?: unknown;
  params?: unknown;
  headers?: unknown;
  response?: unknown;
  type?: unknown;
  detail?: { summary?: string; description?: string; tags?: string[]; deprecated?: boolean };
}

export interface OpenApiInfo {
  title: string;
  version: string;
  description?: string;
}

export type SecurityRequirement = Record<string, string[]>;

export interface Parameter {
  name: string;
  in: "path" | "query" | "header" | "cookie";
  required: boolean;
  description?: string;
  schema: JsonSchema;
}

export interface MediaType {
  schema?: JsonSchema;
}

export interface ResponseObject {
  description: string;
  content?: Record<string, MediaType>;
}

export interface Operation {
  operationId: string;
  summary: string;
  description?: string;
  tags: string[];
  security: SecurityRequirement[];
  parameters?: Parameter[];
  requestBody?: { required: boolean; content: Record<string, MediaType> };
  responses: Record<string, ResponseObject>;
  deprecated?: boolean;
}

export const HTTP_METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];
export type PathItem = Partial<Record<HttpMethod, Operation>>;

export interface OpenApiDocument {
  openapi: "3.1.0";
  info: OpenApiInfo;
  jsonSchemaDialect: string;
  tags: { name: string; description: string }[];
  paths: Record<string, PathItem>;
  components: {
    schemas: Record<string, JsonSchema>;
    securitySchemes: Record<string, Record<string, string>>;
  };
}

const SECURITY_SCHEMES = {
  bearerAuth: { type: "http", scheme: "bearer", bearerFormat: "sk-apl-…", description: "`Authorization: Bearer <key>`." },
  xApiKey: { type: "apiKey", in: "header", name: "x-api-key", description: "The key in `x-api-key`, as Anthropic clients send it (on /v1/models only with `anthropic-version`)." },
  consoleSession: { type: "apiKey", in: "cookie", name: SESSION_COOKIE, description: "The console's session cookie, set by POST /console/api/login." },
};

/** Elysia's `/a/:id/*` → OpenAPI's `/a/{id}/{wildcard}`. */
export function openApiPath(path: string, wildcard = "path"): string {
  return path.replace(/:([A-Za-z0-9_]+)/g, "{$1}").replace(/\*$/, `{${wildcard}}`);
}

/** The operation documenting one route, keyed as operations.ts keys it. */
export function routeKey(route: Pick<RouteLike, "method" | "path">): string {
  return `${route.method.toUpperCase()} ${route.path}`;
}

export function buildOpenApi(app: { routes: readonly RouteLike[] }, info: Partial<OpenApiInfo> = {}): OpenApiDocument {
  const components = new SchemaComponents();
  const errors = { openai: components.add("OpenAIError", OpenAIErrorBody), anthropic: components.add("AnthropicError", AnthropicErrorBody) };
  const paths: Record<string, PathItem> = {};
  for (const route of app.routes) {
    const method = route.method.toLowerCase() as HttpMethod;
    if (!HTTP_METHODS.includes(method)) continue;
    const doc = OPERATIONS[routeKey(route)];
    const path = openApiPath(route.path, doc?.wildcard);
    (paths[path] ??= {})[method] = operation(route, method, path, doc, components, errors);
  }
  const used = new Set(Object.values(paths).flatMap((item) => Object.values(item).flatMap((op) => op.tags)));
  return {
    openapi: "3.1.0",
    info: {
      title: info.title ?? "appliance",
      version: info.version ?? VERSION,
      description:
        info.description ??
        "A self-hosted inference appliance: OpenAI chat completions, Responses, Anthropic Messages, embeddings, classification, decisions, rerank, images, files, batches, and GPU rentals. Generated from the schemas the routes validate with.",
    },
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    // (a tag may cover several prefixes: listed once, at its first)
    tags: TAGS.filter((t, i) => used.has(t.tag) && TAGS.findIndex((u) => u.tag === t.tag) === i).map((t) => ({ name: t.tag, description: t.description })),
    paths,
    components: { schemas: components.schemas, securitySchemes: SECURITY_SCHEMES },
  };
}

function operation(
  route: RouteLike,
  method: HttpMethod,
  path: string,
  doc: OperationDoc | undefined,
  components: SchemaComponents,
  errors: { openai: JsonSchema; anthropic: JsonSchema },
): Operation {
  const hooks = (route.hooks ?? {}) as Hooks;
  const operationId = doc?.operationId ?? `${method}${path.replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? "").toUpperCase())}`;
  const parameters = [
    ...pathParameters(path, hooks.params, components),
    ...(hooks.query ? objectParameters(hooks.query, "query", components) : objectParameters(doc?.query, "query", components, false)),
    ...(doc?.headers ?? []).map((h): Parameter => ({ name: h.name, in: "header", required: h.required ?? false, description: h.description, schema: { type: "string" } })),
    ...(needsCsrf(method.toUpperCase(), route.path) ? [{ name: CSRF_HEADER.name, in: "header" as const, required: true, description: CSRF_HEADER.description, schema: { type: "string" } }] : []),
    ...objectParameters(hooks.headers, "header", components),
  ];
  const body = requestBody(hooks, doc, operationId, components);
  const security = securityOf(path);
  const detail = hooks.detail ?? {};
  const op: Operation = {
    operationId,
    summary: detail.summary ?? doc?.summary ?? `${method.toUpperCase()} ${path}`,
    tags: detail.tags ?? [tagOf(route.path)],
    security,
    responses: {
      ...successResponses(doc, hooks.response, components),
      ...errorResponses({ path, input: body !== undefined || parameters.some((p) => p.in === "query"), body: body !== undefined, params: path.includes("{"), security, extra: doc?.errors ?? [] }, errors),
    },
  };
  const description = detail.description ?? doc?.description;
  if (description) op.description = description;
  if (detail.deprecated) op.deprecated = true;
  if (parameters.length) op.parameters = parameters;
  if (body) op.requestBody = body;
  return op;
}

function pathParameters(path: string, params: unknown, components: SchemaComponents): Parameter[] {
  const props = (params as JsonSchema | undefined)?.properties as Record<string, unknown> | undefined;
  return [...path.matchAll(/\{([^}]+)\}/g)].map(([, name]) => ({
    name: name!,
    in: "path",
    required: true,
    schema: props?.[name!] ? components.inline(props[name!], { hook: true }) : components.inline(PathString),
  }));
}

/** Each property of an object schema (a query or headers hook) as one parameter. */
function objectParameters(schema: unknown, where: "query" | "header", components: SchemaComponents, hook = true): Parameter[] {
  if (!schema) return [];
  const s = schema as JsonSchema;
  const required = new Set((s.required as string[] | undefined) ?? []);
  return Object.entries((s.properties as Record<string, JsonSchema> | undefined) ?? {}).map(([name, prop]) => {
    const p: Parameter = { name, in: where, required: required.has(name), schema: components.inline(prop, { hook }) };
    if (typeof prop.description === "string") p.description = prop.description;
    return p;
  });
}

function requestBody(hooks: Hooks, doc: OperationDoc | undefined, operationId: string, components: SchemaComponents) {
  const name = `${operationId.charAt(0).toUpperCase()}${operationId.slice(1)}Request`;
  if (hooks.body) {
    const type = isMultipart(hooks.body, hooks.type) ? "multipart/form-data" : "application/json";
    return { required: (hooks.body as Record<symbol, unknown>)[OPTIONAL] === undefined, content: { [type]: { schema: components.add(name, hooks.body, { hook: true }) } } };
  }
  if (doc?.body) return { required: true, content: { [doc.body.type]: { schema: components.add(doc.body.name, doc.body.schema) } } };
  return undefined;
}

const OPTIONAL = Symbol.for("TypeBox.Optional");

/** A body with a file in it (Elysia's t.File / t.Files), or one the route declares as a form. */
function isMultipart(body: unknown, type: unknown): boolean {
  if (type === "multipart/form-data" || type === "formdata") return true;
  const props = (body as JsonSchema).properties as Record<string | symbol, unknown>[] | undefined;
  return Object.values(props ?? {}).some((p) => {
    const kind = (p as Record<symbol, unknown>)[Kind];
    return kind === "File" || kind === "Files";
  });
}

function successResponses(doc: OperationDoc | undefined, response: unknown, components: SchemaComponents): Record<string, ResponseObject> {
  const declared = declaredResponses(response);
  if (doc?.ok === false) return {};
  const ok = doc?.ok ?? { description: "Success." };
  const status = String(ok.status ?? 200);
  const type = ok.type ?? "application/json";
  const schema = declared[status];
  const content: Record<string, MediaType> = {};
  if (type) content[type] = schema ? { schema: components.inline(schema, { hook: true }) } : {};
  if (ok.stream) content["text/event-stream"] = {};
  const description = ok.stream ? `${ok.description} With \`stream: true\`, server-sent events: ${ok.stream}` : ok.description;
  const out: Record<string, ResponseObject> = { [status]: type || ok.stream ? { description, content } : { description } };
  for (const [s, sch] of Object.entries(declared)) if (s !== status) out[s] = { description: "Declared by the route.", content: { "application/json": { schema: components.inline(sch, { hook: true }) } } };
  return out;
}

/** Elysia's `response` hook: one schema (the 200), or schemas by status. */
function declaredResponses(response: unknown): Record<string, unknown> {
  if (!response || typeof response !== "object") return {};
  if ((response as Record<symbol, unknown>)[Kind] !== undefined) return { "200": response };
  return response as Record<string, unknown>;
}

function errorResponses(
  o: { path: string; input: boolean; body: boolean; params: boolean; security: SecurityRequirement[]; extra: number[] },
  errors: { openai: JsonSchema; anthropic: JsonSchema },
): Record<string, ResponseObject> {
  const statuses = new Set(o.extra);
  if (o.input) statuses.add(400);
  if (o.body) statuses.add(413);
  if (o.params) statuses.add(404);
  if (o.security.length) statuses.add(401);
  // A scope means the key's rate limits apply (429); the admin API asks for a key but no scope.
  const access = accessOf(o.path);
  const scoped = access.key && access.scope !== null;
  if (scoped || o.path.startsWith("/console/api/")) statuses.add(403);
  if (scoped) statuses.add(429);
  // The error envelope follows the wire format (formatFor in src/1-api/http/errors.ts).
  const schema = o.path.startsWith("/v1/messages")
    ? errors.anthropic
    : o.path.startsWith("/v1/models")
      ? { oneOf: [errors.openai, errors.anthropic], description: "Anthropic's envelope when the request carries `anthropic-version`." }
      : errors.openai;
  const out: Record<string, ResponseObject> = {};
  for (const status of [...statuses].sort()) out[String(status)] = { description: errorDescription(status), content: { "application/json": { schema } } };
  out.default = { description: "Unexpected failure (500 internal_error: the message names only the request id).", content: { "application/json": { schema } } };
  return out;
}

function errorDescription(status: number): string {
  const codes = Object.entries(ERROR_TABLE)
    .filter(([, row]) => row.status === status)
    .map(([code]) => code);
  return codes.length ? `Error; the codes with this status: ${codes.join(", ")}.` : "Error.";
}

/** How the edge authenticates a path: the rules of src/1-api/http/auth.ts and src/1-api/console/session.ts. */
export function securityOf(path: string): SecurityRequirement[] {
  if (accessOf(path).key) {
    const anthropic = path.startsWith("/v1/messages") || path.startsWith("/v1/models");
    return anthropic ? [{ bearerAuth: [] }, { xApiKey: [] }] : [{ bearerAuth: [] }];
  }
  if (path.startsWith("/console/api/") && path !== "/console/api/login") return [{ consoleSession: [] }];
  return [];
}

/** `#/components/schemas/X` → the component (for readers of the document). */
export function resolveRef(doc: OpenApiDocument, schema: JsonSchema): JsonSchema {
  const ref = schema.$ref;
  if (typeof ref !== "string" || !ref.startsWith(SCHEMA_REF)) return schema;
  return doc.components.schemas[ref.slice(SCHEMA_REF.length)] ?? schema;
}
