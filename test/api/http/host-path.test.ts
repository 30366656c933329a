import { afterAll, beforeAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { pathOf } from "../../../src/1-api/http/context";
import { validateConfig } from "../../../src/lib/config";
import { memoryLogger } from "../../../src/lib/log";
import { startServer, type RunningServer } from "../../../src/main";
import { tempDir, testApp, type TestApp } from "../../helpers/app";

// The path a request is routed on is its path, whatever its Host (issue 41 L2). Elysia looks for
// the path from the URL's 12th character on (elysiajs/elysia#748): with a Host of 3 characters or
// fewer ("http://ai/…", an appliance reached by a short LAN name on port 80) every API path was
// cut ("/v1/models" routed as "/models": 404), and a prefix shorter than the gap was skipped
// ("/ab/v1/files" routed, and was authorized, as "/v1/files"). Bun hands over a URL without any
// host when the Host header is missing or no valid authority: the same skipping happened there.

let t: TestApp;
let key: string;
let server: RunningServer;
let serverKey: string;
const dir = tempDir();

beforeAll(async () => {
  t = testApp();
  key = await t.key({ scopes: ["inference"] });
  const banner: string[] = [];
  server = await startServer(validateConfig({ server: { data_dir: dir, port: 0 }, rentals: { discover: false } }), { logger: memoryLogger(), banner: (l) => banner.push(l) });
  serverKey = /sk-apl-[0-9A-Za-z]{44}/.exec(banner.join("\n"))![0];
});
afterAll(async () => {
  await t.close();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

const get = (url: string, headers: Record<string, string> = {}) => t.app.handle(new Request(url, { headers: { authorization: `Bearer ${key}`, ...headers } }));

test("an API path answers whatever the length of the host it was reached by (app.handle)", async () => {
  for (const host of ["a", "ai", "abc", "abcd", "appliance.lan", "[::1]", "10.0.0.2:8484"]) {
    for (const scheme of ["http", "https"]) {
      const res = await get(`${scheme}://${host}/v1/models`);
      expect({ url: `${scheme}://${host}`, status: res.status }).toEqual({ url: `${scheme}://${host}`, status: 200 });
      expect(((await res.json()) as any).object).toBe("list");
    }
  }
  // The query string is read from the right place too.
  expect((await get("http://ai/v1/files?limit=1")).status).toBe(200);
});

test("a short prefix is never skipped: /ab/v1/files is no route (404), with or without a key", async () => {
  for (const url of ["http://a/ab/v1/files", "http://ai/x/v1/files", "https://a/b/v1/models", "http://ai//v1/models"]) {
    const res = await get(url);
    expect({ url, status: res.status }).toEqual({ url, status: 404 });
    expect(((await res.json()) as any).error.message).toContain(new URL(url).pathname);
  }
  const bare = await t.app.handle(new Request("http://a/ab/v1/files"));
  expect(bare.status).toBe(404);
});

test("pathOf reads the path of a URL without a host as it is", () => {
  expect(pathOf("/v1/models?x=1")).toBe("/v1/models");
  expect(pathOf("/ab//v1/files")).toBe("/ab//v1/files");
  expect(pathOf("http://ai/v1/models")).toBe("/v1/models");
  expect(pathOf("http://a")).toBe("/");
});

/** One raw HTTP/1.1 exchange: the status code and the body. */
async function raw(head: string): Promise<{ status: number; body: string }> {
  const { port } = new URL(server.url);
  let out = "";
  await new Promise<void>((resolve, reject) => {
    Bun.connect({
      hostname: "127.0.0.1",
      port: Number(port),
      socket: {
        open: (s) => void s.write(head),
        data: (_s, d) => void (out += new TextDecoder().decode(d)),
        close: () => resolve(),
        error: (_s, e) => reject(e),
      },
    }).catch(reject);
  });
  const [top, ...rest] = out.split("\r\n\r\n");
  return { status: Number(top!.split(" ")[1]), body: rest.join("\r\n\r\n") };
}

const request = (path: string, host: string | null) =>
  raw(`GET ${path} HTTP/1.1\r\n${host === null ? "" : `Host: ${host}\r\n`}Authorization: Bearer ${serverKey}\r\nConnection: close\r\n\r\n`);

test("over real HTTP: a short Host, an empty one and one that is no authority all route on the real path", async () => {
  for (const host of ["ai", "a", "", "a/b", "a@b", "appliance.lan"]) {
    const ok = await request("/v1/models", host);
    expect({ host, status: ok.status }).toEqual({ host, status: 200 });
    expect(JSON.parse(ok.body).object).toBe("list");
    const prefixed = await request("/ab/v1/models", host);
    expect({ host, status: prefixed.status }).toEqual({ host, status: 404 });
    // A prefix longer than Elysia's gap, on a URL without a host (no Host header at all).
    const long = await request("/aaaaaaaaaaaa/v1/models", host);
    expect({ host, status: long.status }).toEqual({ host, status: 404 });
  }
  expect((await request("/health", "a")).status).toBe(200);
  // A body still reaches its route: the model it names is looked up (404 naming it), and a bad one is a 400.
  const post = (body: string) => fetch(`${server.url}/v1/chat/completions`, { method: "POST", headers: { host: "ai", authorization: `Bearer ${serverKey}`, "content-type": "application/json" }, body });
  const missing = await post(JSON.stringify({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] }));
  expect(missing.status).toBe(404);
  expect(((await missing.json()) as any).error.message).toContain("no-such-model");
  expect((await post("{not json")).status).toBe(400);
  // HTTP/1.0 without any Host header (a load balancer's bare health check).
  expect((await raw("GET /health HTTP/1.0\r\n\r\n")).status).toBe(200);
  expect((await raw(`GET /aaaaaaaaaaaa/v1/models HTTP/1.0\r\nAuthorization: Bearer ${serverKey}\r\n\r\n`)).status).toBe(404);
});
