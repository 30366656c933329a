import type { JsonSchema } from "./schema";

// The fuzzer's view of /openapi.json: one entry per operation, with what a request to it needs
// (path parameters, query parameters, a body and its media type, how it authenticates).

export interface Parameter {
  name: string;
  in: "path" | "query" | "header" | "cookie";
  required: boolean;
  schema: JsonSchema;
}

export type Auth = "key" | "session" | "none";

export interface FuzzOperation {
  method: string;
  /** The OpenAPI path template, e.g. "/v1/files/{id}". */
  template: string;
  params: Parameter[];
  body?: { type: string; schema: JsonSchema };
  auth: Auth;
}

export interface OpenApiLike {
  paths: Record<
    string,
    Record<string, { parameters?: Parameter[]; requestBody?: { content: Record<string, { schema?: JsonSchema }> }; security?: Record<string, string[]>[]; responses?: Record<string, { content?: Record<string, unknown> }> }>
  >;
  components: { schemas: Record<string, JsonSchema> };
}

export function operationsOf(doc: OpenApiLike): FuzzOperation[] {
  const ops: FuzzOperation[] = [];
  for (const [template, item] of Object.entries(doc.paths))
    for (const [method, op] of Object.entries(item)) {
      const content = op.requestBody?.content ?? {};
      const type = Object.keys(content)[0];
      const schemes = (op.security ?? []).flatMap((s) => Object.keys(s));
      ops.push({
        method: method.toUpperCase(),
        template,
        params: op.parameters ?? [],
        body: type ? { type, schema: content[type]!.schema ?? {} } : undefined,
        auth: schemes.includes("consoleSession") ? "session" : schemes.length ? "key" : "none",
      });
    }
  return ops;
}

/** What the server holds that requests can name: models by kind, ids of real resources. */
export interface FuzzWorld {
  models: { chat: string[]; embedding: string[]; classifier: string[]; image: string[]; retired: string[] };
  ids: {
    file: string[];
    batch: string[];
    rental: string[];
    /** Console key ids the fuzzer may revoke, rotate and patch (never the key it fuzzes with). */
    key: string[];
    account: string[];
    node: string[];
    consoleFile: string[];
  };
  /** The account fuzzed through POST /console/api/login (never the signed-in one: its throttle would end the run's sessions). */
  loginAccount: string;
}

/** The model kind a route serves, for choosing a `model` field. */
export function modelKindOf(template: string): keyof FuzzWorld["models"] | null {
  if (template.startsWith("/v1/embeddings")) return "embedding";
  if (template.startsWith("/v1/classify")) return "classifier";
  if (template.startsWith("/v1/images")) return "image";
  if (/^\/v1\/(chat|responses|messages)/.test(template)) return "chat";
  return null;
}

/** Real values for a path parameter, by route and name. */
export function realIds(world: FuzzWorld, template: string, name: string, method = "GET"): string[] {
  // The first three files are kept for the routes that read them; only the others are deleted.
  if (method === "DELETE" && template.includes("/files/")) return world.ids.file.slice(3);
  if (name === "model") return [...world.models.chat, ...world.models.embedding, ...world.models.image, ...world.models.retired];
  if (name === "file") return world.ids.consoleFile;
  if (name === "name") return world.ids.account;
  if (template.includes("/files/")) return world.ids.file;
  if (template.includes("/batches/")) return world.ids.batch;
  if (template.includes("/rentals/")) return world.ids.rental;
  if (template.includes("/keys/")) return world.ids.key;
  if (template.includes("/responses/")) return ["resp_0123456789abcdef"];
  return [];
}

/**
 * The content types the document gives for `status` from the operation a request lands on (its
 * path as the server parses it), or null when the path is no operation's. "default" covers the
 * statuses the operation does not list.
 */
export function documentedTypes(doc: OpenApiLike, method: string, pathname: string, status: number): string[] | null {
  for (const [template, item] of Object.entries(doc.paths)) {
    const op = item[method.toLowerCase()];
    if (!op) continue;
    // The last parameter of a route that takes the rest of the path (GET /v1/models/{model}) may hold "/".
    const pattern = template.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\{model\}$/, ".+").replace(/\{[^}]+\}/g, "[^/]+");
    if (!new RegExp(`^${pattern}$`).test(pathname)) continue;
    const res = op.responses?.[String(status)] ?? op.responses?.default;
    return Object.keys(res?.content ?? {});
  }
  return null;
}
