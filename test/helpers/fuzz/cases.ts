import { BUDGET_FIELDS, bodyHint, multipartBody } from "./bodies";
import { operationsOf, realIds, type FuzzOperation, type FuzzWorld, type OpenApiLike } from "./operations";
import { Prng } from "./prng";
import { DEEP_SENTINEL, generate, MUTATIONS, mutate, type Mutation } from "./schema";
import { BAD_ESCAPES, deepJson, EXTREME_NUMBER_TEXTS, hostileString, malformedJson, ODD_PATH_PIECES, PROTOTYPE_KEYS } from "./values";

// Requests generated from /openapi.json: for every operation, one request of every strategy that
// applies to it (a first pass, in a fixed order), then random strategies on random operations
// until the count is reached. Everything comes from one seeded generator: the same seed and count
// give the same requests.

/** How the runner authenticates a case when it sends it (keys and cookies exist only at run time). */
export type CaseAuth = "key" | "none" | "bad-key" | "session" | "session-no-csrf";

export interface FuzzCase {
  n: number;
  /** "METHOD /template" of the operation the case was made from. */
  op: string;
  strategy: string;
  /** What was done to the request, in a few words. */
  what: string;
  method: string;
  /** Path and query, exactly as sent (possibly with malformed escapes). */
  path: string;
  /** Headers besides the auth ones (these win over them). */
  headers: Record<string, string>;
  auth: CaseAuth;
  body?: string;
}

type Made = Partial<Omit<FuzzCase, "n" | "op" | "strategy">> & { what: string };

interface Strategy {
  name: string;
  applies(op: FuzzOperation): boolean;
  make(op: FuzzOperation, r: Prng, world: FuzzWorld): Made;
}

const isJson = (op: FuzzOperation) => op.body?.type === "application/json";
const always = () => true;
const hasBody = (op: FuzzOperation) => op.body !== undefined;
const defaultAuth = (op: FuzzOperation): CaseAuth => (op.auth === "key" ? "key" : op.auth === "session" ? "session" : op.template.startsWith("/console/api/") ? "session" : "none");

/** A path with each `{param}` replaced: a real id, a random word, or (bad) a malformed escape. */
function pathOf(op: FuzzOperation, r: Prng, world: FuzzWorld, mode: "real" | "bad-escape" | "odd" = "real"): string {
  return op.template.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const real = realIds(world, op.template, name, op.method);
    if (mode === "bad-escape") return r.chance(0.5) ? r.pick(BAD_ESCAPES) : `${r.pick(real.length ? real : ["x"])}${r.pick(BAD_ESCAPES)}`;
    if (mode === "odd") return r.pick([...ODD_PATH_PIECES, encodeURIComponent(hostileString(r).toWellFormed() || "x"), "x".repeat(r.pick([300, 5000]))]);
    if (real.length && r.chance(0.75)) return name === "model" && r.chance(0.5) ? r.pick(real) : encodeURIComponent(r.pick(real));
    return encodeURIComponent(r.pick([r.word(), `file-${r.word()}`, `batch_${r.word()}`, `rent_${r.word()}`, `key_${r.word()}`]));
  });
}

/** A query string of the operation's documented parameters, valid-looking. */
function queryOf(op: FuzzOperation, r: Prng): string {
  const parts: string[] = [];
  for (const p of op.params.filter((p) => p.in === "query"))
    if (p.required || r.chance(0.5)) parts.push(`${p.name}=${encodeURIComponent(String(generate(p.schema, { rng: r, doc: { components: { schemas: {} } } })))}`);
  return parts.length ? `?${parts.join("&")}` : "";
}

function jsonText(op: FuzzOperation, r: Prng, world: FuzzWorld, doc: OpenApiLike, m?: Mutation): { text: string; what: string } {
  const value = generate(op.body!.schema, { rng: r, doc, hint: bodyHint(op.template, world, r), optional: m ? 0.3 : 0.15 });
  if (!m) return { text: JSON.stringify(value), what: "valid-looking body" };
  const out = mutate(r, value, m, BUDGET_FIELDS);
  let text = JSON.stringify(out.value) ?? "null";
  const sentinel = JSON.stringify(DEEP_SENTINEL);
  if (text.includes(sentinel)) text = text.replace(sentinel, deepJson(r.pick([64, 256, 1000, 5000, 20_000]), r.pick(["array", "object", "mixed"] as const)));
  return { text, what: out.what };
}

function validBody(op: FuzzOperation, r: Prng, world: FuzzWorld, doc: OpenApiLike): { body?: string; headers: Record<string, string>; what: string } {
  if (!op.body) return { headers: {}, what: "no body" };
  if (op.body.type === "multipart/form-data") {
    const m = multipartBody(r, world, true);
    return { body: m.body, headers: { "content-type": m.contentType }, what: m.what };
  }
  const { text, what } = jsonText(op, r, world, doc);
  return { body: text, headers: { "content-type": "application/json" }, what };
}

export function strategies(doc: OpenApiLike): Strategy[] {
  const base = (op: FuzzOperation, r: Prng, world: FuzzWorld) => ({ path: pathOf(op, r, world) + queryOf(op, r), auth: defaultAuth(op) });
  const list: Strategy[] = [
    {
      name: "valid",
      applies: always,
      make: (op, r, w) => ({ ...base(op, r, w), ...validBody(op, r, w, doc) }),
    },
    ...MUTATIONS.map<Strategy>((m) => ({
      name: `body:${m}`,
      applies: isJson,
      make: (op, r, w) => {
        const { text, what } = jsonText(op, r, w, doc, m);
        return { ...base(op, r, w), body: text, headers: { "content-type": "application/json" }, what };
      },
    })),
    {
      name: "body:upload",
      applies: (op) => op.body?.type === "multipart/form-data",
      make: (op, r, w) => {
        const m = multipartBody(r, w, false);
        return { ...base(op, r, w), body: m.body, headers: { "content-type": m.contentType }, what: m.what };
      },
    },
    {
      name: "body:malformed-json",
      applies: isJson,
      make: (op, r, w) => ({ ...base(op, r, w), body: malformedJson(r, jsonText(op, r, w, doc).text), headers: { "content-type": "application/json" }, what: "malformed JSON" }),
    },
    {
      name: "body:deep-nesting",
      applies: isJson,
      make: (op, r, w) => {
        const depth = r.pick([1000, 10_000, 30_000, 60_000, 100_000]);
        const shape = r.pick(["array", "object", "mixed"] as const);
        const whole = r.chance(0.4);
        const text = whole ? deepJson(depth, shape) : jsonText(op, r, w, doc).text.replace(/^\{/, `{"${r.pick(["messages", "input", "metadata", "tools", "x"])}":${deepJson(depth, shape)},`);
        return { ...base(op, r, w), body: text, headers: { "content-type": "application/json" }, what: `${shape} nesting ${depth} deep (${text.length} bytes)${whole ? " as the body" : " in a field"}` };
      },
    },
    {
      name: "body:content-type",
      applies: (op) => hasBody(op) || op.method !== "GET",
      make: (op, r, w) => {
        const body = op.body ? validBody(op, r, w, doc).body ?? "" : JSON.stringify({ a: 1 });
        const type = r.pick([
          null, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data", "multipart/form-data; boundary=x", "application/xml",
          "application/json; charset=utf-16", "application/json; charset=%ff", "APPLICATION/JSON", "application/json, text/plain", "application/jsonl",
          "application/octet-stream", "application/json;;;", ";", "x".repeat(2000), "application/vnd.api+json", "text/event-stream",
        ]);
        const headers: Record<string, string> = type === null ? {} : { "content-type": type };
        return { ...base(op, r, w), body, headers, what: `content-type ${type === null ? "(none)" : JSON.stringify(type.slice(0, 60))}` };
      },
    },
    {
      name: "body:none",
      applies: hasBody,
      make: (op, r, w) => {
        const headers: Record<string, string> = r.chance(0.5) ? { "content-type": op.body!.type } : {};
        return { ...base(op, r, w), headers, what: "no body" };
      },
    },
    {
      name: "body:large",
      applies: isJson,
      make: (op, r, w) => {
        const size = r.pick([100_000, 1_000_000, 3_000_000]);
        const text = jsonText(op, r, w, doc).text.replace(/^\{/, `{"${r.pick(["prompt", "input", "user", "padding"])}":${JSON.stringify("a".repeat(size))},`);
        return { ...base(op, r, w), body: text, headers: { "content-type": "application/json" }, what: `a ${size}-character string field` };
      },
    },
    {
      name: "body:number-text",
      applies: isJson,
      make: (op, r, w) => {
        const field = r.pick(["max_tokens", "temperature", "n", "steps", "seed", "hours", "usd", "days", "top_k", "dimensions", "max_active_rentals"]);
        const text = jsonText(op, r, w, doc).text.replace(/^\{/, `{"${field}":${r.pick(EXTREME_NUMBER_TEXTS)},`);
        return { ...base(op, r, w), body: text, headers: { "content-type": "application/json" }, what: `number text in ${field}` };
      },
    },
    {
      name: "path:trailing-slash",
      applies: always,
      make: (op, r, w) => {
        const b = base(op, r, w);
        const [p, q] = splitQuery(b.path);
        return { ...b, ...validBody(op, r, w, doc), path: p + r.pick(["/", "//", "/.", "/%2F"]) + q, what: "trailing slash" };
      },
    },
    {
      name: "path:upper-case",
      applies: always,
      make: (op, r, w) => {
        const b = base(op, r, w);
        const [p, q] = splitQuery(b.path);
        const up = r.chance(0.5) ? p.toUpperCase() : p.replace(/[a-z]/, (c) => c.toUpperCase());
        return { ...b, ...validBody(op, r, w, doc), path: up + q, what: "upper-case path" };
      },
    },
    {
      name: "path:bad-escape",
      applies: always,
      make: (op, r, w) => {
        const withParam = op.template.includes("{");
        const path = withParam ? pathOf(op, r, w, "bad-escape") : op.template.replace(/\/([^/]*)$/, (_, last: string) => `/${last}${r.pick(BAD_ESCAPES)}`);
        return { ...base(op, r, w), ...validBody(op, r, w, doc), path, what: withParam ? "malformed escape in a path parameter" : "malformed escape in the path" };
      },
    },
    {
      name: "path:odd",
      applies: always,
      make: (op, r, w) => {
        const withParam = op.template.includes("{");
        const path = withParam && r.chance(0.7)
          ? pathOf(op, r, w, "odd")
          : r.pick([op.template.replace(/^\//, "//"), op.template.replace(/\/([^/]+)$/, "/./$1"), op.template.replace(/\/([^/]+)$/, "/x/../$1"), `${op.template.replace(/\{[^}]+\}/g, "x")}/${r.pick(ODD_PATH_PIECES)}`]).replace(/\{[^}]+\}/g, "x");
        return { ...base(op, r, w), ...validBody(op, r, w, doc), path, what: "odd path" };
      },
    },
    {
      name: "query:hostile",
      applies: always,
      make: (op, r, w) => {
        const names = [...op.params.filter((p) => p.in === "query").map((p) => p.name), ...PROTOTYPE_KEYS, "limit", "after", "days", "beta", r.word()];
        const values = [...BAD_ESCAPES, ...EXTREME_NUMBER_TEXTS, "", "-1", "0", "99999999999999999999", "%5B%5D", "a&b", "[]", "x".repeat(3000)];
        const parts = Array.from({ length: r.int(1, 4) }, () => `${r.chance(0.2) ? r.pick(BAD_ESCAPES) : r.pick(names)}${r.chance(0.1) ? "" : `=${r.pick(values)}`}`);
        return { ...base(op, r, w), ...validBody(op, r, w, doc), path: `${pathOf(op, r, w)}?${parts.join("&")}`, what: "hostile query" };
      },
    },
    {
      name: "cookie:hostile",
      applies: always,
      make: (op, r, w) => {
        const cookie = r.pick([
          "appliance_session=%", "appliance_session=%ff", "appliance_session=%E0%A4%A", "appliance_session=", "appliance_session", "appliance_session=a; appliance_session=b",
          `appliance_session=${"x".repeat(5000)}`, "__proto__=1; constructor=2", "=; ;;", "appliance_session=%00", `appliance_session="quoted"`, "a=%ff; appliance_session=%zz",
        ]);
        const v = validBody(op, r, w, doc);
        return { ...base(op, r, w), ...v, headers: { ...v.headers, cookie }, what: `cookie ${cookie.slice(0, 50)}` };
      },
    },
    {
      name: "auth:none",
      applies: (op) => op.auth !== "none",
      make: (op, r, w) => ({ ...base(op, r, w), ...validBody(op, r, w, doc), auth: "none", what: "no credentials" }),
    },
    {
      name: "auth:bad",
      applies: always,
      make: (op, r, w) => {
        const v = validBody(op, r, w, doc);
        const header = r.pick<[string, string]>([
          ["authorization", "Bearer sk-apl-000000000000000000000000000000000000000000000000"], ["authorization", "Bearer"], ["authorization", "Bearer "],
          ["authorization", "Basic YWRtaW46YWRtaW4="], ["authorization", "Bearer sk-apl-%ff"], ["authorization", `Bearer ${"x".repeat(5000)}`],
          ["authorization", "bearer  sk-apl-x  extra"], ["x-api-key", "sk-apl-nope"], ["x-api-key", ""], ["authorization", "Bearer \u00ff"],
        ]);
        return { ...base(op, r, w), ...v, auth: op.auth === "session" ? "session-no-csrf" : "bad-key", headers: { ...v.headers, [header[0]]: header[1] }, what: `${header[0]}: ${header[1].slice(0, 40)}` };
      },
    },
    {
      name: "method:other",
      applies: always,
      make: (op, r, w) => {
        const method = r.pick(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"].filter((m) => m !== op.method));
        return { ...base(op, r, w), ...validBody(op, r, w, doc), method, what: `${method} instead of ${op.method}` };
      },
    },
    {
      name: "header:hostile",
      applies: always,
      make: (op, r, w) => {
        const v = validBody(op, r, w, doc);
        const [name, value] = r.pick<[string, string]>([
          ["anthropic-version", r.pick(["2023-06-01", "", "%ff", "x".repeat(3000)])], ["anthropic-beta", "%ff,__proto__"], ["idempotency-key", r.pick(["", "%ff", "x".repeat(5000), "__proto__", "k1"])],
          ["origin", r.pick(["null", "http://evil.example", "http://[", "http://localhost:99999", "%ff"])], ["sec-fetch-site", "cross-site"], ["x-csrf-token", r.pick(["", "%ff", "x".repeat(3000)])],
          ["accept", "text/event-stream"], ["accept-encoding", "gzip, br, zstd"], ["x-forwarded-for", r.pick(["%ff", "::ffff:127.0.0.1", "1.2.3.4, 5.6.7.8", "x".repeat(3000)])],
          ["x-forwarded-proto", "https"], ["x-request-id", "%ff"], ["range", "bytes=0-0"], ["if-none-match", "*"],
        ]);
        return { ...base(op, r, w), ...v, headers: { ...v.headers, [name]: value }, what: `${name}: ${value.slice(0, 40)}` };
      },
    },
  ];
  return list;
}

function splitQuery(p: string): [string, string] {
  const i = p.indexOf("?");
  return i < 0 ? [p, ""] : [p.slice(0, i), p.slice(i)];
}

/** Weights of the strategies in the random pass: body mutations where there is a body. */
function weightOf(s: Strategy): number {
  if (s.name === "valid") return 3;
  if (s.name.startsWith("body:")) return s.name === "body:large" || s.name === "body:deep-nesting" ? 0.5 : 2;
  return 1;
}

export function generateCases(doc: OpenApiLike, world: FuzzWorld, o: { seed: number; count: number }): FuzzCase[] {
  const r = new Prng(o.seed);
  const ops = operationsOf(doc);
  const all = strategies(doc);
  const cases: FuzzCase[] = [];
  const add = (op: FuzzOperation, s: Strategy, rr: Prng) => {
    const made = s.make(op, rr, world);
    cases.push({
      n: cases.length,
      op: `${op.method} ${op.template}`,
      strategy: s.name,
      what: made.what,
      method: made.method ?? op.method,
      path: made.path ?? op.template,
      headers: made.headers ?? {},
      auth: made.auth ?? defaultAuth(op),
      ...(made.body === undefined || ["GET", "HEAD"].includes(made.method ?? op.method) ? {} : { body: made.body }),
    });
  };
  // First pass: every operation meets every strategy that applies to it.
  for (const op of ops) for (const s of all) if (s.applies(op) && cases.length < o.count) add(op, s, r.fork());
  // Then random operations and strategies, bodies more often.
  while (cases.length < o.count) {
    const op = r.pick(ops);
    const s = r.weighted(all.filter((s) => s.applies(op)).map((s) => [s, weightOf(s)] as const));
    add(op, s, r.fork());
  }
  return cases;
}
