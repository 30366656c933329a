import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { configTarget, replaceConfigFile, targetConfig } from "../../../cli/config-file";
import { ensureChatModel } from "../../../models/cache";
import { catalogue, parseEntry, type CatalogueEntry } from "../../../models/catalogue";
import { ensureOnnxModel } from "../../../models/onnx/cache";
import { createPullJobs } from "../../../src/2-services/console/pulls";
import { consolePullTools } from "../../../src/ops/pull/console";
import { chatRuntime } from "../../../src/3-engines/llama/factory";
import { createPlanner } from "../../../src/3-engines/planner/planner";
import { loadConfig } from "../../../src/lib/config";
import { applyReload } from "../../../src/ops/reload";
import { BASE, testApp, type TestApp } from "../../helpers/app";
import { LocalHub, repoFilesOf, sha256, trickle } from "../../helpers/hub";
import { consoleAccount, consoleClient, type ConsoleClient } from "./client";

// The console's model pulls (issue 48) over real HTTP (app.handle), with the real downloader
// (src/ops/pull/pull.ts) against a local server that speaks the Hugging Face hub's API
// (test/helpers/hub.ts) holding generated tiny models: progress while a pull runs, hashes checked,
// a cancel that keeps its .part and a pull that resumes it with a Range request, a tampered blob
// refused, the pulled model added to a real config file and served without a restart, its memory
// plan, and every route refused to anyone but a signed-in admin.

const COMMIT = "3333333333333333333333333333333333333333";
let hub: LocalHub;
let t: TestApp;
let admin: ConsoleClient;
let user: ConsoleClient;
let configFile: string;
let chat: Uint8Array; // the tiny chat GGUF (316 KB)
let other: Uint8Array; // another tiny chat GGUF (554 KB)

/** Storage blobs (by SHA-256) whose downloads trickle: 16 KB every 60 ms, so progress can be watched. */
const slow = new Set<string>();
const hubFetch = async (url: string, init: RequestInit): Promise<Response> => {
  const res = await fetch(url, init);
  const key = new URL(res.url || url).pathname.replace(/^\/blob\//, "");
  if (!slow.has(key) || !res.body) return res;
  return new Response(trickle(res.body, { chunk: 16 * 1024, ms: 60, signal: init.signal }), { status: res.status, statusText: res.statusText, headers: res.headers });
};

beforeAll(async () => {
  chat = new Uint8Array(readFileSync(await ensureChatModel("small-chat")));
  other = new Uint8Array(readFileSync(await ensureChatModel("chat")));
  const embed = repoFilesOf(await ensureOnnxModel("embed"), (path) => path.endsWith(".onnx"));
  hub = new LocalHub();
  hub.addRepo("acme/Tiny-GGUF", COMMIT, { "Tiny-Q4_K_M.gguf": { bytes: chat, lfs: true }, "README.md": { bytes: new TextEncoder().encode("# tiny\n"), lfs: false } });
  hub.addRepo("acme/Resume-GGUF", COMMIT, { "Resume-Q8_0.gguf": { bytes: other, lfs: true } });
  hub.addRepo("acme/Bad-GGUF", COMMIT, { "Bad-Q4_K_M.gguf": { bytes: chat.slice(), lfs: true } });
  hub.addRepo("acme/Two-GGUF", COMMIT, { "Two-Q4_K_M.gguf": { bytes: chat, lfs: true }, "Two-Q8_0.gguf": { bytes: other, lfs: true } });
  hub.addRepo("acme/tiny-embed", COMMIT, embed);

  // A catalogue of the local hub's models: a download entry (URLs, sizes, SHA-256), an "hf" entry
  // (a repository and commit, checked against the hub's records), one with no checksum, and a demo one.
  const url = (repo: string, path: string) => `${hub.endpoint}/${repo}/resolve/${COMMIT}/${path}`;
  const entries: CatalogueEntry[] = [
    {
      id: "tiny-chat",
      name: "Tiny chat (download entry)",
      kind: "chat",
      description: "the tiny chat GGUF by URL, size and SHA-256",
      max_context: 2048,
      files: { model: { url: url("acme/Tiny-GGUF", "Tiny-Q4_K_M.gguf"), path: "Tiny-Q4_K_M.gguf", bytes: chat.length, sha256: sha256(chat) } },
      manifest: { slots: 1 },
    },
    {
      id: "tiny-embed",
      name: "Tiny embed (hub entry)",
      kind: "embedding",
      description: "the tiny embedding model by repository and commit",
      max_context: 128,
      source: "hf",
      hf: { repo: "acme/tiny-embed", revision: COMMIT, files: Object.fromEntries(Object.keys(embed).map((p, i) => [`f${i}`, p])) },
      manifest: { files: { model: "." } },
    },
    {
      id: "no-checksum",
      name: "Unverified",
      kind: "chat",
      description: "a download with no checksum recorded",
      max_context: 2048,
      files: { model: { url: url("acme/Tiny-GGUF", "Tiny-Q4_K_M.gguf"), path: "x.gguf", bytes: null, sha256: null } },
    },
    catalogue().find((e) => e.id === "demo-chat")!,
  ].map((e) => parseEntry(JSON.stringify(e)));

  t = testApp({
    config: { engines: { device: "cpu", threads: 1 }, rentals: { discover: false } },
    override: (d) => ({
      console: {
        ...d.console,
        pulls: createPullJobs({
          tools: consolePullTools({ modelsDir: join(d.config.server.data_dir, "models"), catalogue: () => entries, hub: { endpoint: hub.endpoint, fetch: hubFetch } }),
          registry: d.registry,
          planner: createPlanner(d.config, { logger: d.logger, runtime: chatRuntime(d.config, d.logger) }),
          logger: d.logger,
        }),
      },
    }),
  });
  // The config file the server "was started from": what add writes and the reload reads, as serve.ts wires it.
  configFile = join(t.dir, "config.toml");
  writeFileSync(configFile, `# test config\nmodels_dir = ${JSON.stringify(t.dir)}\n\n[server]\ndata_dir = ${JSON.stringify(t.dir)}\n\n[engines]\ndevice = "cpu"\nthreads = 1\n\n[rentals]\ndiscover = false\n`);
  t.deps.console.pulls.useConfigFile({
    target: () => configTarget(configFile),
    read: (target) => targetConfig(target, undefined),
    write: (target, text, check) => replaceConfigFile(target, text, undefined, check),
    reload: () => applyReload(t.deps, loadConfig({ file: configFile }).config),
  });
  admin = consoleClient(t);
  await admin.signIn("root", await consoleAccount(t, "root", { admin: true }));
  user = consoleClient(t);
  await user.signIn("alice", await consoleAccount(t, "alice"));
}, 120_000);

afterAll(async () => {
  hub?.stop();
  await t?.close();
});

const errorOf = async (res: Response) => ((await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } }).error;
const modelsDir = () => join(t.dir, "models");

async function until<T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 20_000, everyMs = 40): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(everyMs);
  }
}
const pullOf = (id: string) => admin.json("GET", `/console/api/admin/pulls/${id}`);
const ended = (id: string) => until(`pull ${id} to end`, async () => {
  const p = await pullOf(id);
  return ["done", "failed", "cancelled"].includes(p.state) ? p : null;
});
async function startPull(source: string) {
  const res = await admin.call("POST", "/console/api/admin/pulls", { source });
  expect(res.status).toBe(202);
  return (await res.json()) as any;
}

describe("who may call the pull routes", () => {
  const ROUTES: [string, string, unknown?][] = [
    ["GET", "/console/api/admin/catalogue"],
    ["GET", "/console/api/admin/pulls"],
    ["POST", "/console/api/admin/pulls", { source: "tiny-chat" }],
    ["GET", "/console/api/admin/pulls/pull_x"],
    ["POST", "/console/api/admin/pulls/pull_x/cancel", {}],
    ["POST", "/console/api/admin/pulls/pull_x/add", {}],
    ["GET", "/console/api/admin/models/tiny-chat/plan"],
  ];

  test("a request without a session is 401 not_signed_in on every route", async () => {
    for (const [method, path, body] of ROUTES) {
      const res = await t.app.handle(new Request(BASE + path, { method, headers: { origin: BASE, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) }));
      expect([method, path, res.status, (await errorOf(res)).code]).toEqual([method, path, 401, "not_signed_in"]);
    }
  });

  test("a signed-in account that is not an admin is 403 admin_only on every route, and starts nothing", async () => {
    for (const [method, path, body] of ROUTES) {
      const res = await user.call(method, path, body);
      expect([method, path, res.status, (await errorOf(res)).code]).toEqual([method, path, 403, "admin_only"]);
    }
    expect((await admin.json("GET", "/console/api/admin/pulls")).data).toEqual([]);
  });

  test("an admin's write without the session's CSRF token, or from another origin, is 403 csrf_failed", async () => {
    for (const [method, path, body] of ROUTES.filter(([m]) => m === "POST")) {
      const refused: Record<string, string>[] = [{ "x-csrf-token": "" }, { "x-csrf-token": "x".repeat(32) }, { origin: "http://evil.example" }, { "sec-fetch-site": "cross-site" }];
      for (const headers of refused) {
        const res = await admin.call(method, path, body, headers);
        expect([path, headers, res.status, (await errorOf(res)).code]).toEqual([path, headers, 403, "csrf_failed"]);
      }
    }
    expect((await admin.json("GET", "/console/api/admin/pulls")).data).toEqual([]);
  });
});

describe("sources", () => {
  test("bad sources are a 400 naming the source, and start nothing", async () => {
    const cases: [unknown, RegExp][] = [
      [{}, /source: a catalogue id or hf:OWNER\/REPO\[:QUANT\] is required/],
      [{ source: 42 }, /is required/],
      [{ source: "   " }, /is required/],
      [{ source: "tiny chat" }, /without spaces/],
      [{ source: `hf:acme/${"x".repeat(400)}` }, /up to 300 characters/],
      [{ source: "hf:acme" }, /is not a Hugging Face reference/],
      [{ source: "hf:acme/Tiny-GGUF/../x.gguf" }, /must name a file or folder inside the repository/],
      [{ source: "no-such-model" }, /no model "no-such-model" in the catalogue/],
      [{ source: "demo-chat" }, /generated demo model/],
      [{ source: "no-checksum" }, /no checksum recorded for x\.gguf/],
      [{ source: "hf:acme/Missing-GGUF:Q4_K_M" }, /not found on http:\/\/127\.0\.0\.1:\d+ \(HTTP 404\)/],
      [{ source: "hf:acme/Tiny-GGUF:Q9_X" }, /no GGUF with quantisation Q9_X \(it has: Q4_K_M\)/],
      [{ source: "hf:acme/Two-GGUF" }, /2 GGUFs in it; choose one with :QUANT \(Q4_K_M, Q8_0\)/],
    ];
    for (const [body, message] of cases) {
      const res = await admin.call("POST", "/console/api/admin/pulls", body);
      const e = await errorOf(res);
      expect([body, res.status, e.type, e.param]).toEqual([body, 400, "invalid_request_error", "source"]);
      expect(e.message).toMatch(message);
    }
    const array = await admin.call("POST", "/console/api/admin/pulls", ["tiny-chat"]);
    expect([array.status, (await errorOf(array)).message]).toEqual([400, "the body must be a JSON object"]);
    expect((await admin.json("GET", "/console/api/admin/pulls")).data).toEqual([]);
  });

  test("the catalogue lists each entry with its size, whether it can be pulled and whether its files are here", async () => {
    const { data, models_dir } = await admin.json("GET", "/console/api/admin/catalogue");
    expect(models_dir).toBe(modelsDir());
    const byId = Object.fromEntries(data.map((e: any) => [e.id, e]));
    expect(byId["tiny-chat"]).toMatchObject({ kind: "chat", source: "download", bytes: chat.length, pullable: true, status: "missing", configured: false, pulling: false });
    expect(byId["tiny-embed"]).toMatchObject({ kind: "embedding", source: "hf", bytes: null, pullable: true, status: "missing" });
    expect(byId["no-checksum"]).toMatchObject({ pullable: false, status: null });
    expect(byId["demo-chat"]).toMatchObject({ source: "generated", pullable: false, status: null });
  });
});

describe("pulls", () => {
  let tinyPull: any;

  test("a pull from the hub reports its bytes rising, a rate and the time left, and finishes with every file verified", async () => {
    slow.add(sha256(chat));
    const started = await startPull("hf:acme/Tiny-GGUF:Q4_K_M");
    expect(started).toMatchObject({ source: "hf:acme/Tiny-GGUF:Q4_K_M", model: "tiny-q4_k_m", kind: "chat", commit: COMMIT, bytes_total: chat.length, error: null, added: false, configured: false });
    expect(["queued", "running"]).toContain(started.state);
    expect(started.files).toEqual([{ role: "model", path: "Tiny-Q4_K_M.gguf", bytes: chat.length, bytes_done: 0, state: expect.any(String) }]);

    const seen: any[] = [];
    const done = await until("the pull to finish", async () => {
      const p = await pullOf(started.id);
      seen.push(p);
      return p.state === "done" || p.state === "failed" ? p : null;
    });
    slow.delete(sha256(chat));
    expect(done.error).toBeNull();
    expect(done).toMatchObject({ state: "done", verified: true, bytes_done: chat.length, bytes_total: chat.length, file: null, eta_s: null, rate: 0 });
    expect(done.files[0]).toMatchObject({ state: "done", bytes_done: chat.length });
    // Progress rose through values between nothing and everything, never backwards, with a rate and an ETA.
    const running = seen.filter((p) => p.state === "running");
    const bytes = running.map((p) => p.bytes_done);
    expect(bytes).toEqual([...bytes].sort((a, b) => a - b));
    expect(new Set(bytes.filter((b) => b > 0 && b < chat.length)).size).toBeGreaterThanOrEqual(3);
    expect(running.some((p) => p.rate > 0 && p.eta_s > 0 && p.file === "Tiny-Q4_K_M.gguf")).toBe(true);
    // What is on disk is the hub's file, and nothing else is left there.
    const dir = join(modelsDir(), "tiny-q4_k_m");
    expect(sha256(new Uint8Array(readFileSync(join(dir, "Tiny-Q4_K_M.gguf"))))).toBe(sha256(chat));
    expect(readdirSync(dir)).toEqual(["Tiny-Q4_K_M.gguf"]);
    tinyPull = done;
  }, 30_000);

  test("catalogue entries pull too: by URL with its SHA-256, and by repository and commit", async () => {
    const byUrl = await ended((await startPull("tiny-chat")).id);
    expect(byUrl).toMatchObject({ state: "done", model: "tiny-chat", commit: null, verified: true, bytes_done: chat.length });
    const byHub = await ended((await startPull("tiny-embed")).id);
    expect(byHub.error).toBeNull();
    expect(byHub).toMatchObject({ state: "done", model: "tiny-embed", kind: "embedding", commit: COMMIT, verified: true });
    expect(byHub.files.length).toBeGreaterThan(3);
    expect(byHub.files.every((f: any) => f.state === "done" && f.bytes_done === f.bytes)).toBe(true);
    const listed = (await admin.json("GET", "/console/api/admin/catalogue")).data;
    expect(listed.find((e: any) => e.id === "tiny-chat").status).toBe("present");
    expect(listed.find((e: any) => e.id === "tiny-embed").status).toBe("present");
    // A second pull of what is there checks the sizes and downloads nothing.
    const before = hub.storageSeen.length;
    const again = await ended((await startPull("tiny-chat")).id);
    expect(again).toMatchObject({ state: "done", files: [{ state: "present" }] });
    expect(hub.storageSeen.length).toBe(before);
  }, 30_000);

  test("a cancelled pull keeps its .part, and pulling it again resumes it with a Range request", async () => {
    slow.add(sha256(other));
    const first = await startPull("hf:acme/Resume-GGUF:Q8_0");
    await until("some bytes", async () => (await pullOf(first.id)).bytes_done > 64 * 1024);
    // One pull per model at a time.
    const twice = await admin.call("POST", "/console/api/admin/pulls", { source: "hf:acme/Resume-GGUF:Q8_0" });
    expect(twice.status).toBe(409);
    expect((await errorOf(twice)).message).toContain(`model "resume-q8_0" is being pulled already (${first.id})`);

    const cancelled = await admin.json("POST", `/console/api/admin/pulls/${first.id}/cancel`, {});
    expect(cancelled).toMatchObject({ state: "cancelled", error: null });
    expect(cancelled.message).toContain("pull it again to resume");
    const part = join(modelsDir(), "resume-q8_0", "Resume-Q8_0.gguf.part");
    expect(existsSync(part)).toBe(true);
    const kept = statSync(part).size;
    expect(kept).toBeGreaterThan(0);
    expect(kept).toBeLessThan(other.length);
    expect(existsSync(join(modelsDir(), "resume-q8_0", "Resume-Q8_0.gguf"))).toBe(false);
    // A cancelled pull cannot be cancelled again or added.
    expect((await admin.call("POST", `/console/api/admin/pulls/${first.id}/cancel`, {})).status).toBe(409);
    expect((await admin.call("POST", `/console/api/admin/pulls/${first.id}/add`, {})).status).toBe(409);

    slow.delete(sha256(other));
    const seenBefore = hub.storageSeen.length;
    const second = await ended((await startPull("hf:acme/Resume-GGUF:Q8_0")).id);
    expect(second).toMatchObject({ state: "done", resumed_bytes: kept, bytes_done: other.length, verified: true });
    const ranges = hub.storageSeen.slice(seenBefore).map((s) => s.range);
    expect(ranges).toEqual([`bytes=${kept}-`]);
    expect(sha256(new Uint8Array(readFileSync(join(modelsDir(), "resume-q8_0", "Resume-Q8_0.gguf"))))).toBe(sha256(other));
    expect(existsSync(part)).toBe(false);
    // Both pulls stay listed, newest first.
    const ids = (await admin.json("GET", "/console/api/admin/pulls")).data.map((p: any) => p.id);
    expect(ids.indexOf(second.id)).toBeLessThan(ids.indexOf(first.id));
  }, 30_000);

  test("a tampered blob fails the pull with the expected and the actual hash, and leaves nothing behind", async () => {
    const bad = (hub as any).repos.get("acme/Bad-GGUF").get(COMMIT).get("Bad-Q4_K_M.gguf").bytes as Uint8Array;
    const forged = bad.slice();
    forged[forged.length - 10] = forged[forged.length - 10]! ^ 0xff;
    hub.tampered.set(sha256(bad), forged);
    const failed = await ended((await startPull("hf:acme/Bad-GGUF:Q4_K_M")).id);
    expect(failed.state).toBe("failed");
    expect(failed.verified).toBe(false);
    expect(failed.error).toBe(`Bad-Q4_K_M.gguf: checksum mismatch: expected sha256 ${sha256(bad)}, got ${sha256(forged)}; the download was deleted`);
    expect(readdirSync(join(modelsDir(), "bad-q4_k_m"))).toEqual([]);
    expect((await admin.call("POST", `/console/api/admin/pulls/${failed.id}/add`, {})).status).toBe(409);
  }, 30_000);

  test("an unknown pull is 404", async () => {
    for (const [method, path] of [["GET", "/console/api/admin/pulls/pull_nope"], ["POST", "/console/api/admin/pulls/pull_nope/cancel"], ["POST", "/console/api/admin/pulls/pull_nope/add"]] as const) {
      const res = await admin.call(method, path, method === "POST" ? {} : undefined);
      expect([path, res.status, (await errorOf(res)).message]).toEqual([path, 404, "No such pull: pull_nope"]);
    }
  });

  test("adding a pulled model writes the config file and serves it at once: the console and /v1/models list it, its plan shows, it loads", async () => {
    expect(tinyPull?.state).toBe("done");
    const key = await t.key({ account: "api-user", creditUsd: 1 });
    const v1 = async () => ((await (await t.request("GET", "/v1/models", { key })).json()) as any).data.map((m: any) => m.id);
    expect(await v1()).not.toContain("tiny-q4_k_m");
    const bad = await admin.call("POST", `/console/api/admin/pulls/${tinyPull.id}/add`, { replace: "yes" });
    expect([bad.status, (await errorOf(bad)).param]).toEqual([400, "replace"]);

    const added = await admin.json("POST", `/console/api/admin/pulls/${tinyPull.id}/add`, {});
    expect(added).toMatchObject({ file: configFile, created: false, replaced: false, served: true, reload: { added: ["tiny-q4_k_m"], removed: [], replaced: [] } });
    expect(added.manifest).toMatchObject({ id: "tiny-q4_k_m", kind: "chat", files: { model: "models/tiny-q4_k_m/Tiny-Q4_K_M.gguf" }, context: "auto" });
    expect(added.pull).toMatchObject({ added: true, configured: true });
    const text = readFileSync(configFile, "utf8");
    expect(text.startsWith("# test config\n")).toBe(true); // the file's own lines kept
    expect(text).toContain('[[models]]\nid = "tiny-q4_k_m"');
    expect(loadConfig({ file: configFile }).config.models.map((m) => m.id)).toEqual(["tiny-q4_k_m"]);

    expect((await admin.json("GET", "/console/api/models")).data.find((m: any) => m.id === "tiny-q4_k_m")).toMatchObject({ kind: "chat", state: "unloaded" });
    expect(await v1()).toContain("tiny-q4_k_m");
    // Non-admins see the list too.
    expect((await user.json("GET", "/console/api/models")).data.map((m: any) => m.id)).toContain("tiny-q4_k_m");
    // Added once: again is a 409 unless it replaces the entry.
    const again = await admin.call("POST", `/console/api/admin/pulls/${tinyPull.id}/add`, {});
    expect([again.status, (await errorOf(again)).message]).toEqual([409, `${configFile}: model "tiny-q4_k_m" is in it already (replace: true replaces its entry)`]);
    expect((await admin.json("POST", `/console/api/admin/pulls/${tinyPull.id}/add`, { replace: true })).replaced).toBe(true);
    expect(loadConfig({ file: configFile }).config.models.map((m) => m.id)).toEqual(["tiny-q4_k_m"]);

    // The memory plan before loading: where it goes and how much memory it takes.
    const plan = await admin.json("GET", "/console/api/admin/models/tiny-q4_k_m/plan");
    expect(plan).toMatchObject({ id: "tiny-q4_k_m", kind: "chat", state: "unloaded", fits: "together", device: "cpu", gpu_layers: 0, unloads: [] });
    expect(plan.memory_mb.cpu).toBeGreaterThan(0);
    expect(plan.context_size).toBeGreaterThan(0);
    expect(plan.devices.map((d: any) => d.id)).toContain("cpu");
    const loaded = await admin.json("POST", "/console/api/admin/models/tiny-q4_k_m/load", {});
    expect(loaded).toMatchObject({ state: "loaded", device: "cpu" });
    // The plan said what the load did.
    expect(loaded.memory_mb).toEqual(plan.memory_mb);
    expect(loaded.context_size).toBe(plan.context_size);
    expect(await admin.json("GET", "/console/api/admin/models/tiny-q4_k_m/plan")).toMatchObject({ fits: "loaded", state: "loaded", device: "cpu", memory_mb: plan.memory_mb });
    const served = await t.request("POST", "/v1/chat/completions", { key, body: { model: "tiny-q4_k_m", messages: [{ role: "user", content: "hi" }], max_tokens: 3 } });
    expect(served.status).toBe(200);

    // An embedding model from the catalogue is added with the catalogue's name.
    const embed = (await admin.json("GET", "/console/api/admin/pulls")).data.find((p: any) => p.model === "tiny-embed" && p.state === "done");
    const e = await admin.json("POST", `/console/api/admin/pulls/${embed.id}/add`, {});
    expect(e.manifest).toMatchObject({ id: "tiny-embed", name: "Tiny embed (hub entry)", kind: "embedding", files: { model: "models/tiny-embed" } });
    expect(await v1()).toContain("tiny-embed");
    expect(await admin.json("GET", "/console/api/admin/models/tiny-embed/plan")).toMatchObject({ fits: "together", device: "cpu" });

    const unknown = await admin.call("GET", "/console/api/admin/models/nope/plan");
    expect(unknown.status).toBe(404);
  }, 60_000);
});
