import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ensureChatModel } from "../../models/cache";
import { chatTestApp } from "../helpers/chat";
import type { TestApp } from "../helpers/app";
import { consoleAccount, consoleClient, type ConsoleClient } from "./console/client";

// The admin models API (issue 28): GET /api/v1/admin/models lists each model's residency; POST
// …/{id}/load and …/{id}/unload change it, on the real llama.cpp engine with tiny models that load
// on first use. Keys of admin accounts only (any scope); the console's admin routes do the same.

let t: TestApp;
let admin: string;
let adminRental: string;
let user: string;
let consoleAdmin: ConsoleClient;
let consoleUser: ConsoleClient;

const STATUS_KEYS = ["context_size", "device", "error", "gpu_layers", "id", "idle_s", "in_flight", "keep_alive_s", "kind", "last_used", "memory_mb", "pinned", "slots", "state", "waiting"];

beforeAll(async () => {
  const chat = await ensureChatModel("chat");
  t = await chatTestApp({ extraModels: [{ id: "org/tiny", name: "Tiny with a slash", kind: "chat", files: { model: chat }, max_context: 512, slots: 1, load: "first_use" }] });
  await t.deps.accounts.createAccount("ops", { role: "admin" });
  admin = await t.key({ account: "ops", scopes: ["inference"] });
  adminRental = await t.key({ account: "ops", scopes: ["rental"] });
  user = await t.key({ scopes: ["inference", "rental"], creditUsd: 5 });
  await consoleAccount(t, "root", { admin: true });
  await consoleAccount(t, "someone");
  consoleAdmin = consoleClient(t);
  consoleUser = consoleClient(t);
  expect((await consoleAdmin.signIn("root", "pw-root-0123456789")).status).toBe(200);
  expect((await consoleUser.signIn("someone", "pw-someone-0123456789")).status).toBe(200);
}, 120_000);
afterAll(() => t.close());

const list = async (key = admin) => ((await (await t.request("GET", "/api/v1/admin/models", { key })).json()) as { object: string; data: any[] });
const statusOf = async (id: string) => (await list()).data.find((m) => m.id === id);

async function eventually<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > end) return v;
    await Bun.sleep(50);
  }
}

describe("who may call it", () => {
  test("no key is a 401, on the routes and on an unknown path under /api/v1/admin", async () => {
    for (const [method, path] of [["GET", "/api/v1/admin/models"], ["POST", "/api/v1/admin/models/chat/load"], ["GET", "/api/v1/admin/nothing"]] as const) {
      const res = await t.request(method, path);
      expect(res.status).toBe(401);
      expect((await res.json()).error.code).toBe("invalid_api_key");
    }
  });

  test("a key of a non-admin account is a 403 admin_only, whatever its scopes, and loads nothing", async () => {
    for (const [method, path] of [["GET", "/api/v1/admin/models"], ["POST", "/api/v1/admin/models/chat/load"], ["POST", "/api/v1/admin/models/chat/unload"]] as const) {
      const res = await t.request(method, path, { key: user });
      expect(res.status).toBe(403);
      expect((await res.json()).error).toMatchObject({ code: "admin_only", type: "permission_error" });
    }
    expect((await statusOf("chat")).state).toBe("unloaded");
  });

  test("a key of an admin account answers with any scope (inference only, rental only)", async () => {
    for (const key of [admin, adminRental]) expect((await t.request("GET", "/api/v1/admin/models", { key })).status).toBe(200);
  });
});

test("the list holds every served model's residency, none loaded before a request", async () => {
  const body = await list();
  expect(body.object).toBe("list");
  expect(body.data.map((m) => m.id)).toEqual(["chat", "small-chat", "tight", "org/tiny"]);
  for (const m of body.data) {
    expect(Object.keys(m).sort()).toEqual(STATUS_KEYS);
    expect(m).toMatchObject({ kind: "chat", state: "unloaded", pinned: false, keep_alive_s: 300, memory_mb: null, in_flight: 0, waiting: 0, idle_s: null });
  }
});

test("load, then unload: the state goes unloaded → loaded → unloaded, and a second unload says not_loaded", async () => {
  const loaded = await t.request("POST", "/api/v1/admin/models/small-chat/load", { key: admin });
  expect(loaded.status).toBe(200);
  const status = await loaded.json();
  expect(Object.keys(status).sort()).toEqual(STATUS_KEYS);
  expect(status).toMatchObject({ id: "small-chat", state: "loaded", in_flight: 0 });
  expect(typeof status.last_used).toBe("number");
  expect((await statusOf("small-chat")).state).toBe("loaded");
  expect((await statusOf("chat")).state).toBe("unloaded"); // only what was asked

  // Loading a loaded model again answers its status; nothing changes.
  expect((await (await t.request("POST", "/api/v1/admin/models/small-chat/load", { key: admin })).json()).state).toBe("loaded");

  const unloaded = await t.request("POST", "/api/v1/admin/models/small-chat/unload", { key: admin });
  expect(unloaded.status).toBe(200);
  expect(await unloaded.json()).toEqual({ id: "small-chat", result: "unloaded" });
  expect((await statusOf("small-chat")).state).toBe("unloaded");
  expect(await (await t.request("POST", "/api/v1/admin/models/small-chat/unload", { key: admin })).json()).toEqual({ id: "small-chat", result: "not_loaded" });
}, 60_000);

test("a model loaded by a request shows its idle time; unloading it waits for a request in flight (when_idle)", async () => {
  const openai = (t as Awaited<ReturnType<typeof chatTestApp>>).openai(user);
  await openai.chat.completions.create({ model: "chat", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
  const idle = await statusOf("chat");
  expect(idle).toMatchObject({ state: "loaded", in_flight: 0 });
  expect(idle.idle_s).toBeGreaterThanOrEqual(0);

  const stream = await openai.chat.completions.create({ model: "chat", messages: [{ role: "user", content: "Tell a long story." }], max_tokens: 400, stream: true });
  const it = stream[Symbol.asyncIterator]();
  await it.next(); // the stream runs: it holds the model
  const busy = await statusOf("chat");
  expect(busy).toMatchObject({ state: "loaded", in_flight: 1, idle_s: null });
  expect(await (await t.request("POST", "/api/v1/admin/models/chat/unload", { key: admin })).json()).toEqual({ id: "chat", result: "when_idle" });
  expect((await statusOf("chat")).state).toBe("loaded"); // never cut
  let chunks = 1;
  while (!(await it.next()).done) chunks++;
  expect(chunks).toBeGreaterThan(2);
  expect((await eventually(() => statusOf("chat"), (m) => m.state === "unloaded")).state).toBe("unloaded");
}, 60_000);

test("an id with a slash is loaded and unloaded, sent as is or percent-encoded", async () => {
  const load = await t.request("POST", "/api/v1/admin/models/org/tiny/load", { key: admin });
  expect(load.status).toBe(200);
  expect((await load.json()).id).toBe("org/tiny");
  expect(await (await t.request("POST", "/api/v1/admin/models/org%2Ftiny/unload", { key: admin })).json()).toEqual({ id: "org/tiny", result: "unloaded" });
}, 60_000);

test("an unknown id is a 404 model_not_found; a path that is not {id}/load or {id}/unload is a 404 not_found", async () => {
  for (const action of ["load", "unload"]) {
    const res = await t.request("POST", `/api/v1/admin/models/no-such-model/${action}`, { key: admin });
    expect(res.status).toBe(404);
    expect((await res.json()).error).toMatchObject({ code: "model_not_found", type: "invalid_request_error" });
  }
  for (const path of ["/api/v1/admin/models/chat/explode", "/api/v1/admin/models/chat", "/api/v1/admin/models//load"]) {
    const res = await t.request("POST", path, { key: admin });
    expect(res.status).toBe(404);
    expect((await res.json()).error.code).toBe("not_found");
  }
  expect((await t.request("GET", "/api/v1/admin/models/chat", { key: admin })).status).toBe(404);
});

describe("the console", () => {
  test("the Models list carries each model's residency", async () => {
    const { data } = await consoleUser.json("GET", "/console/api/models");
    const chat = data.find((m: any) => m.id === "chat");
    expect(chat).toMatchObject({ id: "chat", name: "Tiny chat", kind: "chat", max_context: 4096, supports_vision: false, in_flight: 0, keep_alive_s: 300, pinned: false });
    expect(["loaded", "unloaded"]).toContain(chat.state);
  });

  test("an admin's session loads and unloads a model (its id percent-encoded)", async () => {
    const loaded = await consoleAdmin.json("POST", "/console/api/admin/models/org%2Ftiny/load");
    expect(loaded).toMatchObject({ id: "org/tiny", state: "loaded" });
    expect((await statusOf("org/tiny")).state).toBe("loaded");
    expect(await consoleAdmin.json("POST", "/console/api/admin/models/org%2Ftiny/unload")).toEqual({ id: "org/tiny", result: "unloaded" });
    expect((await statusOf("org/tiny")).state).toBe("unloaded");
  }, 60_000);

  test("a user's session is a 403 admin_only; an admin's without the CSRF token a 403 csrf_failed; unknown ids a 404", async () => {
    const res = await consoleUser.call("POST", "/console/api/admin/models/chat/load");
    expect(res.status).toBe(403);
    expect((await res.json()).error.code).toBe("admin_only");
    const noCsrf = await consoleAdmin.call("POST", "/console/api/admin/models/chat/load", undefined, { "x-csrf-token": "" });
    expect(noCsrf.status).toBe(403);
    expect((await noCsrf.json()).error.code).toBe("csrf_failed");
    const unknown = await consoleAdmin.call("POST", "/console/api/admin/models/nope/unload");
    expect(unknown.status).toBe(404);
    expect((await statusOf("chat")).state).toBe("unloaded");
  });
});
