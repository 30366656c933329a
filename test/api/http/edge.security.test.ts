import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { validateConfig } from "../../../src/lib/config";
import { memoryLogger } from "../../../src/lib/log";
import { startServer } from "../../../src/main";
import { BASE, tempDir, testApp, type TestApp } from "../../helpers/app";
import { manifestConfig } from "../../helpers/models";
import { MAX_JSON_DEPTH, MAX_JSON_VALUES } from "../../../src/lib/bounded-json";

// The edge as an attacker meets it: auth decided on the matched route (trailing slashes, case),
// malformed escapes, hostile JSON, bodies without a length, field names of Object.prototype.

let t: TestApp;
let key: string;
let adminKey: string;
beforeAll(async () => {
  t = testApp({ config: { ...manifestConfig(), server: { max_body_mb: 3 } } });
  key = await t.key({ scopes: ["inference", "rental"] });
  await t.deps.accounts.createAccount("edge-admin", { role: "admin" });
  adminKey = await t.key({ account: "edge-admin" });
});
afterAll(() => t.close());

type Operation = { method: string; path: string; secured: boolean };
async function operations(): Promise<Operation[]> {
  const doc = (await (await t.request("GET", "/openapi.json", { key })).json()) as {
    paths: Record<string, Record<string, { security?: unknown[] }>>;
  };
  return Object.entries(doc.paths).flatMap(([path, ops]) =>
    Object.entries(ops).map(([method, op]) => ({
      method: method.toUpperCase(),
      path: path.replace(/\{[^}]+\}/g, "x"),
      secured: (op.security ?? []).some((s) => Object.keys(s as object).some((k) => k === "bearerAuth")),
    })),
  );
}

const bare = (method: string, path: string, headers: Record<string, string> = {}, body?: BodyInit) =>
  t.app.handle(new Request(BASE + path, { method, headers, body }));

describe("auth is decided on the matched route", () => {
  test("every secured route, with a trailing slash, asks for a key as the route itself does", async () => {
    const ops = (await operations()).filter((o) => o.secured);
    expect(ops.length).toBeGreaterThan(20);
    const wrong: string[] = [];
    for (const o of ops) {
      for (const path of [o.path, `${o.path}/`]) {
        const res = await bare(o.method, path, { "content-type": "application/json" }, o.method === "GET" || o.method === "DELETE" ? undefined : "{}");
        if (res.status !== 401) wrong.push(`${o.method} ${path}: ${res.status}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  test("no route answers 2xx without a key when its path is written in another case", async () => {
    const wrong: string[] = [];
    for (const o of (await operations()).filter((o) => o.secured)) {
      const res = await bare(o.method, o.path.toUpperCase());
      if (res.status < 300) wrong.push(`${o.method} ${o.path.toUpperCase()}: ${res.status}`);
    }
    expect(wrong).toEqual([]);
  });

  test("/openapi.json/ and /reference/ without a key are 401, with one 200", async () => {
    for (const path of ["/openapi.json/", "/reference/"]) {
      expect((await bare("GET", path)).status).toBe(401);
      expect((await t.request("GET", path, { key })).status).toBe(200);
    }
  });

  test("/metrics/ is /metrics: 401 without a key, 403 for a user's key, 200 for an admin's, never a 500", async () => {
    expect((await bare("GET", "/metrics/")).status).toBe(401);
    expect((await t.request("GET", "/metrics/", { key })).status).toBe(403);
    expect((await t.request("GET", "/metrics/", { key: adminKey })).status).toBe(200);
  });

  test("an unknown route under /v1 is still a 401 without a key, and a 404 with one", async () => {
    expect((await bare("GET", "/v1/models/x/y/z")).status).toBe(401);
    expect((await t.request("GET", "/v1/models/x/y/z", { key })).status).toBe(404);
  });
});

describe("malformed percent-escapes", () => {
  test.each(["/v1/models/%ff", "/v1/files/%ff", "/v1/files/%ff/content", "/v1/batches/%e0%80", "/api/v1/rentals/%ff"])(
    "GET %s is a 400 that names the path parameter",
    async (path) => {
      const res = await t.request("GET", path, { key });
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: { code: string | null; param: string; message: string } };
      expect(body.error.message).toContain("malformed percent-escape");
      expect(body.error.param).toBeString();
    },
  );
});

describe("hostile JSON", () => {
  const nested = (depth: number, inner = "0") => "[".repeat(depth) + inner + "]".repeat(depth);
  const routes = [
    { path: "/v1/chat/completions", body: (x: string) => `{"model":"m","messages":[{"role":"user","content":${x}}]}`, anthropic: false },
    { path: "/v1/responses", body: (x: string) => `{"model":"m","input":${x}}`, anthropic: false },
    { path: "/v1/messages", body: (x: string) => `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":${x}}]}`, anthropic: true },
    { path: "/v1/messages/count_tokens", body: (x: string) => `{"model":"m","messages":[{"role":"user","content":${x}}]}`, anthropic: true },
    { path: "/v1/embeddings", body: (x: string) => `{"model":"m","input":${x}}`, anthropic: false },
  ];

  test.each(routes)("$path: a body nested 30,000 deep is a 400 invalid_json in its envelope", async ({ path, body, anthropic }) => {
    const res = await t.request("POST", path, { key, body: body(nested(30_000)) });
    expect(res.status).toBe(400);
    const json = (await res.json()) as any;
    if (anthropic) expect(json).toEqual({ type: "error", error: { type: "invalid_request_error", message: `request body is nested deeper than ${MAX_JSON_DEPTH} levels` } });
    else expect(json.error).toMatchObject({ code: "invalid_json", message: `request body is nested deeper than ${MAX_JSON_DEPTH} levels` });
  });

  test("nesting up to the bound is parsed (and judged by the route's own rules)", async () => {
    const res = await t.request("POST", "/v1/embeddings", { key, body: `{"model":"m","input":${nested(MAX_JSON_DEPTH - 1)}}` });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.code).not.toBe("invalid_json");
  });

  test("brackets inside strings do not count as nesting", async () => {
    const res = await t.request("POST", "/v1/embeddings", { key, body: JSON.stringify({ model: "m", input: "[".repeat(10_000) + '\\"{' }) });
    expect(((await res.json()) as any).error.code).not.toBe("invalid_json");
  });

  test("a body with more values than the bound is a 400 invalid_json", async () => {
    const res = await t.request("POST", "/v1/embeddings", { key, body: `{"model":"m","input":[${"0,".repeat(MAX_JSON_VALUES)}0]}` });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error).toMatchObject({ code: "invalid_json", message: `request body holds more than ${MAX_JSON_VALUES} values` });
  });

  test("tool-call arguments nested past the bound are a 400 that names them", async () => {
    const res = await t.request("POST", "/v1/chat/completions", {
      key,
      body: {
        model: "m",
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: nested(5000) } }] },
        ],
      },
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error).toMatchObject({
      param: "messages[1].tool_calls[0].function.arguments",
      message: `messages[1].tool_calls[0].function.arguments: must be a JSON string (the text is nested deeper than ${MAX_JSON_DEPTH} levels)`,
    });
  });

  test("the server answers the next request at once after a hostile body", async () => {
    await t.request("POST", "/v1/chat/completions", { key, body: `{"model":"m","messages":${nested(60_000)}}` });
    expect((await bare("GET", "/health")).status).toBe(200);
  });
});

describe("field names of Object.prototype", () => {
  test.each(["toString", "constructor", "__proto__", "valueOf", "hasOwnProperty"])("/v1/responses with a field named %s is a 400 naming it", async (name) => {
    const res = await t.request("POST", "/v1/responses", { key, body: `{"model":"m","input":"hi","${name}":1}` });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.param).toBe(name);
  });

  test.each([
    { path: "/v1/embeddings", body: '{"model":{"toString":1},"input":"x"}', param: "model" },
    { path: "/v1/chat/completions", body: '{"model":"m","messages":[{"role":{"valueOf":1,"toString":{}},"content":"x"}]}', param: "messages[0].role" },
    { path: "/v1/messages", body: '{"model":"m","max_tokens":{"toString":null},"messages":[]}', param: "max_tokens" },
  ])("$path: a value whose own toString is not a function is a 400 naming $param", async ({ path, body, param }) => {
    const res = await t.request("POST", path, { key, body });
    expect(res.status).toBe(400);
    const json = (await res.json()) as any;
    expect(json.error.message).toStartWith(`${param}: `);
    if (!path.startsWith("/v1/messages")) expect(json.error.param).toBe(param);
  });
});

describe("bodies without a length", () => {
  const chunked = (bytes: number) => {
    let sent = 0;
    return new ReadableStream<Uint8Array>({
      pull(c) {
        if (sent >= bytes) return c.close();
        const n = Math.min(64 * 1024, bytes - sent);
        sent += n;
        c.enqueue(new Uint8Array(n).fill(32));
      },
    });
  };
  const post = (path: string, body: ReadableStream, headers: Record<string, string>) =>
    t.app.handle(new Request(BASE + path, { method: "POST", headers: { authorization: `Bearer ${key}`, ...headers }, body, duplex: "half" } as RequestInit));

  test("a chunked JSON body past server.max_body_mb is a 413 in the API's envelope", async () => {
    const res = await post("/v1/chat/completions", chunked(5 * 1024 * 1024), { "content-type": "application/json" });
    expect(res.status).toBe(413);
    expect(((await res.json()) as any).error).toMatchObject({ code: "payload_too_large", type: "invalid_request_error" });
  });

  test("a chunked file upload past server.max_body_mb is a 413 in the API's envelope", async () => {
    const res = await post("/v1/files", chunked(5 * 1024 * 1024), { "content-type": "multipart/form-data; boundary=x" });
    expect(res.status).toBe(413);
    expect(((await res.json()) as any).error.code).toBe("payload_too_large");
  });

  test("over a socket, a chunked body far past the limit gets the envelope's 413, not the HTTP server's bare one", async () => {
    const dir = tempDir();
    const banner: string[] = [];
    const config = validateConfig({ server: { data_dir: dir, port: 0, max_body_mb: 2 }, rentals: { discover: false }, models: [] });
    const server = await startServer(config, { logger: memoryLogger(), banner: (l) => banner.push(l) });
    try {
      const own = /(sk-apl-[0-9A-Za-z]{44})/.exec(banner.join("\n"))![1]!;
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${own}`, "content-type": "application/json" },
        body: chunked(70 * 1024 * 1024),
        duplex: "half",
      } as RequestInit);
      expect(res.status).toBe(413);
      expect(res.headers.get("content-type")).toBe("application/json");
      expect(((await res.json()) as any).error).toMatchObject({ code: "payload_too_large", message: "request body is larger than the limit of 2097152 bytes (server.max_body_mb)" });
    } finally {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("a chunked body under the limit is read whole", async () => {
    const body = new Blob([JSON.stringify({ model: "m", input: "x".repeat(200_000) })]).stream();
    const res = await post("/v1/embeddings", body, { "content-type": "application/json" });
    expect(((await res.json()) as any).error?.code).not.toBe("payload_too_large");
  });
});
