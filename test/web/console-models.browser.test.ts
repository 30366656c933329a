import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import type { Browser, Page } from "playwright-core";
import { ensureChatModel } from "../../models/cache";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { launchChromium, adminPasswordOf, signIn } from "../helpers/browser";
import { tempDir } from "../helpers/app";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { CLUSTER_SECRET, embedModelToml, nodeCli, nodeConfig, startNode, stopNodes, type TestNode } from "../helpers/nodes";
import { freshDatabase } from "../helpers/postgres";
import { CLI, serveCli } from "../helpers/cli";
import { LocalHub, sha256, trickle } from "../helpers/hub";

// The console's Models page in a real browser (Debian's chromium through playwright-core) against
// the real server: each model's state, device, memory and idle time, and an admin loading and
// unloading a model from the page. A screenshot goes to test/output/console/models-loaded.png.
// On a cluster (issue 45: a PostgreSQL store, a second real node beside it) the page lists every
// node's models with a Node column and each one's price (the other node's from its heartbeat) —
// test/output/console/models-cluster.png.
// Pulls (issue 48): a real `appliance serve` with a config file, pulling from a local Hugging Face
// hub (test/helpers/hub.ts) through a proxy that trickles the download: an admin pulls a model by
// hf: reference, watches the bar move and finish, adds it to the config and loads it from the page;
// a non-admin sees the list without the pull section, and the pull API answers the page's own
// requests 403. axe at 390 px and 1440 px; test/output/console/models-admin-{390,1440}.png.

const SHOTS = join(import.meta.dir, "..", "output", "console");
const dir = tempDir("appliance-console-models-");
let server: RunningServer;
let browser: Browser;
let page: Page;
let adminPassword: string;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  const chat = await ensureChatModel("chat");
  const small = await ensureChatModel("small-chat");
  const config = validateConfig({
    server: { data_dir: dir, port: 0 },
    rentals: { discover: false },
    engines: { device: "cpu", threads: 1 },
    models: [
      { id: "chat", name: "Tiny chat", kind: "chat", files: { model: chat }, max_context: 2048, slots: 2, load: "first_use" },
      { id: "small-chat", name: "Tiny small chat", kind: "chat", files: { model: small }, max_context: 1024, slots: 1, load: "start" },
    ],
  });
  const banner: string[] = [];
  server = await startServer(config, { logger: memoryLogger(), banner: (l) => banner.push(l) });
  adminPassword = adminPasswordOf(banner);
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1400, height: 700 } });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const state = (id: string) => server.deps.registry.status().find((s) => s.id === id)!.state;

test("an admin sees each model's residency, loads a model from the page and unloads it", async () => {
  await page.goto(`${server.url}/console#/models`);
  await signIn(page, "admin", adminPassword);

  const chat = page.locator('#models-table tr[data-model-id="chat"]');
  const small = page.locator('#models-table tr[data-model-id="small-chat"]');
  await chat.waitFor();
  expect(await chat.getAttribute("data-state")).toBe("unloaded");
  expect(await chat.locator(".state").textContent()).toContain("unloads after 5 min idle");
  expect(await small.getAttribute("data-state")).toBe("loaded");
  expect(await small.locator(".state").textContent()).toContain("pinned");
  expect(await small.locator(".device").textContent()).toContain("cpu");
  expect(await small.getByRole("button", { name: "Unload small-chat" }).count()).toBe(1);
  // One node (SQLite): no Node column.
  expect(await page.locator("#models-table thead th").allTextContents()).not.toContain("Node");
  expect(await page.locator("#models-table tr[data-node]").count()).toBe(0);

  await chat.getByRole("button", { name: "Load chat" }).click();
  await page.getByText("Loaded chat", { exact: false }).waitFor({ timeout: 30_000 });
  expect(state("chat")).toBe("loaded");
  await page.locator('#models-table tr[data-model-id="chat"][data-state="loaded"]').waitFor();
  expect(await chat.locator(".in-flight").textContent()).toBe("0");
  // The idle time is shown and counts on (the page polls every 5 s).
  await page.waitForFunction(() => /\d+ s/.test(document.querySelector('#models-table tr[data-model-id="chat"] .idle')?.textContent ?? ""), null, { timeout: 15_000 });
  await page.screenshot({ path: join(SHOTS, "models-loaded.png"), fullPage: true });

  await chat.getByRole("button", { name: "Unload chat" }).click();
  await page.getByText("Unloaded chat.").waitFor();
  expect(state("chat")).toBe("unloaded");
  await page.locator('#models-table tr[data-model-id="chat"][data-state="unloaded"]').waitFor();
  expect(await chat.getByRole("button", { name: "Load chat" }).count()).toBe(1);
  expect(await chat.locator(".memory").textContent()).toBe("—");
}, 90_000);

test("a state changed elsewhere shows on the page by itself", async () => {
  await server.deps.registry.adminLoad("chat");
  await page.locator('#models-table tr[data-model-id="chat"][data-state="loaded"]').waitFor({ timeout: 15_000 });
  await server.deps.registry.adminUnload("chat");
  await page.locator('#models-table tr[data-model-id="chat"][data-state="unloaded"]').waitFor({ timeout: 15_000 });
}, 60_000);

const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

test("the page with its admin buttons passes axe-core's WCAG 2.1 A/AA rules", async () => {
  await page.evaluate(AXE);
  const result = await page.evaluate(() => (window as any).axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } }));
  expect((result.violations as { id: string }[]).map((v) => v.id)).toEqual([]);
}, 30_000);

describe("on a cluster", () => {
  const dirA = tempDir("appliance-console-models-a-");
  let a: RunningServer;
  let b: TestNode;
  let password: string;
  let cluster: Page;

  beforeAll(async () => {
    const storeUrl = await freshDatabase("console_models");
    const files = await ensureOnnxModel("embed");
    const banner: string[] = [];
    a = await startServer(
      validateConfig({
        server: { data_dir: dirA, port: 0 },
        store: { url: storeUrl },
        cluster: { advertise_url: "http://127.0.0.1:{port}", secret: CLUSTER_SECRET },
        rentals: { discover: false },
        engines: { device: "cpu", threads: 1 },
        models: [{ id: "embed", name: "Tiny embed", kind: "embedding", files: { model: files }, max_context: 512 }],
      }),
      { logger: memoryLogger(), banner: (l) => banner.push(l) },
    );
    password = adminPasswordOf(banner);
    b = await startNode(nodeConfig(embedModelToml("embed-b", files)), storeUrl);
    await a.deps.node.beat(); // A reads B's row now rather than at its next beat
    cluster = await browser.newPage({ viewport: { width: 1500, height: 600 } });
  }, 180_000);

  afterAll(async () => {
    await cluster?.close();
    await a?.stop();
    await stopNodes();
    rmSync(dirA, { recursive: true, force: true });
  });

  test("every node's models with a Node column: this node's live with its buttons, the other's from its beat; a model the other node loads shows loaded", async () => {
    await cluster.goto(`${a.url}/console#/models`);
    await signIn(cluster, "admin", password);
    const mine = cluster.locator(`#models-table tr[data-node="${a.deps.node.id}"][data-model-id="embed"]`);
    const theirs = cluster.locator(`#models-table tr[data-node="${b.id}"][data-model-id="embed-b"]`);
    await mine.waitFor();
    await theirs.waitFor();
    expect((await cluster.locator("#models-table thead th").allTextContents())[0]).toBe("Node");
    expect(await mine.locator(".node").textContent()).toBe(`${a.deps.node.id}this node`);
    expect(await theirs.locator(".node").textContent()).toBe(b.id);
    expect(await mine.getByRole("button", { name: "Load embed" }).count()).toBe(1);
    expect(await theirs.getByRole("button").count()).toBe(0);
    expect(await theirs.getAttribute("data-state")).toBe("unloaded");
    expect(await theirs.locator(".state").textContent()).toContain("as of its last heartbeat");
    // Each row's price: this node's from its live prices, the other's from its heartbeat.
    const price = (row: typeof mine) => row.locator(".price").evaluate((td) => td.firstChild?.textContent);
    expect(await price(mine)).toBe("$0.02 per M");
    expect(await price(theirs)).toBe("$0.02 per M");

    expect((await nodeCli(b, ["ps", "load", "embed-b"])).code).toBe(0);
    // B's next beat carries it (3 s), A's next beat reads it (3 s), the page polls (5 s).
    await cluster.locator(`#models-table tr[data-node="${b.id}"][data-model-id="embed-b"][data-state="loaded"]`).waitFor({ timeout: 20_000 });
    await cluster.screenshot({ path: join(SHOTS, "models-cluster.png"), fullPage: true });
  }, 60_000);

  test("the cluster's page passes axe-core's WCAG 2.1 A/AA rules", async () => {
    await cluster.evaluate(AXE);
    const result = await cluster.evaluate(() => (window as any).axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } }));
    expect((result.violations as { id: string }[]).map((v) => v.id)).toEqual([]);
  }, 30_000);
});

describe("pulling a model from the console", () => {
  const COMMIT = "4444444444444444444444444444444444444444";
  const pullDir = tempDir("appliance-console-pull-");
  const configPath = join(pullDir, "config.toml");
  let hub: LocalHub;
  let proxy: ReturnType<typeof Bun.serve>;
  let child: Subprocess;
  let url: string;
  let password: string;
  let gguf: Uint8Array;
  let admin: Page;
  let log = "";

  /** The CLI on the served data dir, run asynchronously (the server's pipes keep draining), with `input` on stdin. */
  async function cliOn(args: string[], input?: string) {
    const c = Bun.spawn([process.execPath, CLI, ...args], {
      env: { PATH: process.env.PATH ?? "", HOME: pullDir, XDG_CONFIG_HOME: join(pullDir, "no-config"), APPLIANCE_DATA_DIR: pullDir, APPLIANCE_CONFIG: configPath },
      stdin: input === undefined ? "ignore" : new Blob([input]),
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stdout, stderr, code] = await Promise.all([new Response(c.stdout).text(), new Response(c.stderr).text(), c.exited]);
    if (code !== 0) throw new Error(`appliance ${args.join(" ")} failed (${code}): ${stderr}`);
    return stdout;
  }

  beforeAll(async () => {
    gguf = new Uint8Array(readFileSync(await ensureChatModel("small-chat")));
    hub = new LocalHub();
    hub.addRepo("acme/Tiny-GGUF", COMMIT, { "Tiny-Q4_K_M.gguf": { bytes: gguf, lfs: true }, "README.md": { bytes: new TextEncoder().encode("# tiny\n"), lfs: false } });
    // The hub as the server sees it (HF_ENDPOINT): its API as is; its storage redirects pointed back
    // here, and the downloads trickled (Range passed through).
    proxy = Bun.serve({
      port: 0,
      async fetch(req) {
        const u = new URL(req.url);
        const storage = /^\/storage\/(\d+)(\/.*)$/.exec(u.pathname);
        const headers = new Headers(req.headers);
        headers.delete("host");
        const res = await fetch(storage ? `http://localhost:${storage[1]}${storage[2]}` : `${hub.endpoint}${u.pathname}${u.search}`, { method: req.method, headers, redirect: "manual" });
        const location = res.headers.get("location");
        if (location) {
          const to = new URL(location);
          return new Response(null, { status: res.status, headers: { location: `http://127.0.0.1:${proxy.port}/storage/${to.port}${to.pathname}` } });
        }
        if (!storage || !res.body) return res;
        // 8 KB every 100 ms: the tiny model's 316 KB take about 4 s, long enough to watch.
        return new Response(trickle(res.body, { chunk: 8 * 1024, ms: 100 }), { status: res.status, headers: res.headers });
      },
    });
    writeFileSync(configPath, ["# the console pull test's config", "", "[engines]", 'device = "cpu"', "threads = 1", "", "[rentals]", "discover = false", ""].join("\n"));
    const served = await serveCli(pullDir, ["--port", "0"], { APPLIANCE_CONFIG: configPath, HF_ENDPOINT: `http://127.0.0.1:${proxy.port}` });
    child = served.child;
    url = served.url;
    password = adminPasswordOf([served.banner]);
    // its output drained (the last of it kept for a failure's message), or a full pipe would stall it
    for (const stream of [child.stdout, child.stderr] as ReadableStream<Uint8Array>[])
      void (async () => {
        for await (const chunk of stream) log = (log + new TextDecoder().decode(chunk)).slice(-20_000);
      })().catch(() => {});
    await cliOn(["accounts", "create", "viewer"]);
    await cliOn(["accounts", "password", "viewer"], "viewer-password-0123\n");
    admin = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  }, 180_000);

  afterAll(async () => {
    await admin?.close();
    child?.kill("SIGKILL");
    await child?.exited;
    proxy?.stop(true);
    hub?.stop();
    rmSync(pullDir, { recursive: true, force: true });
  });

  const axe = async (p: Page) => {
    await p.evaluate(AXE);
    const result = await p.evaluate(() => (window as any).axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } }));
    return (result.violations as { id: string; nodes: { target: string[] }[] }[]).map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
  };

  test("an admin pulls a model by hf: reference, sees the bar move and finish, adds it to the config and loads it", async () => {
    await admin.goto(`${url}/console#/models`);
    await signIn(admin, "admin", password);
    const section = admin.getByTestId("pull-section");
    await section.getByRole("heading", { name: "Pull a model" }).waitFor();
    // The shipped catalogue fills the list, grouped by kind.
    await admin.locator('select[name="catalogue"] option[value="qwen3-1.7b"]').waitFor({ state: "attached" });
    expect(await admin.locator('select[name="catalogue"] optgroup').evaluateAll((gs) => gs.map((g) => (g as HTMLOptGroupElement).label))).toContain("Chat");

    await section.getByLabel("Or a Hugging Face reference").fill("hf:acme/Tiny-GGUF:Q4_K_M");
    await section.getByRole("button", { name: "Pull", exact: true }).click();
    const item = admin.locator("li.pull").first();
    await item.waitFor();
    expect(await item.locator(".pull-model").textContent()).toBe("tiny-q4_k_m");
    const bar = item.getByRole("progressbar", { name: "Download of tiny-q4_k_m" });
    // The bar moves: a value between nothing and everything, and the line says how much, how fast, how long.
    const seen: number[] = [];
    await admin.waitForFunction(() => {
      const b = document.querySelector("li.pull progress") as HTMLProgressElement | null;
      return b !== null && b.hasAttribute("value") && b.value > 0 && b.value < b.max;
    }, null, { timeout: 20_000, polling: 100 });
    seen.push(Number(await bar.getAttribute("value")));
    expect(Number(await bar.getAttribute("max"))).toBe(gguf.length);
    await admin.waitForFunction(() => /KB of 316\.4 KB · [\d.]+ KB\/s · \d+ s left/.test(document.querySelector("li.pull .pull-text")?.textContent ?? ""), null, { timeout: 10_000, polling: 100 });
    expect(await item.locator(".pull-file").textContent()).toBe("File 1 of 1: Tiny-Q4_K_M.gguf");
    await admin.screenshot({ path: join(SHOTS, "models-pull-progress.png"), fullPage: true });
    await admin.waitForFunction((before) => Number((document.querySelector("li.pull progress") as HTMLProgressElement | null)?.value ?? 0) > before, seen[0]!, { timeout: 10_000, polling: 100 });

    await admin.locator('li.pull[data-state="done"]').waitFor({ timeout: 30_000 });
    expect(Number(await bar.getAttribute("value"))).toBe(gguf.length);
    expect(await item.locator(".pull-text").textContent()).toBe("316.4 KB · every file's size and SHA-256 verified");
    await admin.getByText("Pulled tiny-q4_k_m: every file verified. Add it to the config to serve it.").waitFor();
    expect(sha256(new Uint8Array(readFileSync(join(pullDir, "models", "tiny-q4_k_m", "Tiny-Q4_K_M.gguf"))))).toBe(sha256(gguf));
    // The download went through the storage host, in one go.
    expect(hub.storageSeen.map((s) => s.range)).toEqual([null]);

    await item.getByRole("button", { name: "Add tiny-q4_k_m to the config" }).click();
    await admin.getByText(`Added tiny-q4_k_m to ${configPath}; the server serves it now.`).waitFor();
    expect(readFileSync(configPath, "utf8")).toContain('[[models]]\nid = "tiny-q4_k_m"');
    // Served without a restart: the table lists it, and the plan shows before loading.
    await admin.locator('#models-table tr[data-model-id="tiny-q4_k_m"][data-state="unloaded"]').waitFor();
    await admin.waitForFunction(() => /^Memory plan: on cpu: [\d,]+ MB RAM, [\d,]+ tokens × 2 slots$/.test(document.querySelector("li.pull .pull-plan")?.textContent ?? ""), null, { timeout: 20_000 });
    const load = item.getByRole("button", { name: "Load tiny-q4_k_m" });
    expect(await load.evaluate((b) => b === document.activeElement)).toBe(true);
    await load.click();
    await admin.getByText("Loaded tiny-q4_k_m on cpu.").waitFor({ timeout: 30_000 });
    await admin.locator('#models-table tr[data-model-id="tiny-q4_k_m"][data-state="loaded"]').waitFor();
    expect(await item.locator(".pull-plan").textContent()).toMatch(/^Loaded on cpu: [\d,]+ MB RAM, [\d,]+ tokens × 2 slots$/);
    expect(await item.getByRole("button").evaluateAll((bs) => bs.filter((b) => !(b as HTMLElement).hidden).length)).toBe(0);

    // The table's own Plan button, for a model not loaded.
    const row = admin.locator('#models-table tr[data-model-id="tiny-q4_k_m"]');
    await row.getByRole("button", { name: "Unload tiny-q4_k_m" }).click();
    await admin.getByText("Unloaded tiny-q4_k_m.").waitFor();
    await row.getByRole("button", { name: "Memory plan of tiny-q4_k_m" }).click();
    await row.locator(".plan-text").waitFor();
    expect(await row.locator(".plan-text").textContent()).toMatch(/^planned: [\d,]+ MB RAM on cpu$/);
    expect(await row.getByRole("button", { name: "Memory plan of tiny-q4_k_m" }).count()).toBe(0);
    // The pull's own plan follows: the model is not loaded any more, and can be loaded from there again.
    await admin.waitForFunction(() => /^Memory plan: on cpu/.test(document.querySelector("li.pull .pull-plan")?.textContent ?? ""), null, { timeout: 20_000 });
    await load.waitFor();
  }, 90_000);

  test("the page with the pull section passes axe at 1440 and 390 px", async () => {
    expect(await axe(admin)).toEqual([]);
    await admin.screenshot({ path: join(SHOTS, "models-admin-1440.png"), fullPage: true });
    await admin.setViewportSize({ width: 390, height: 844 });
    await admin.getByTestId("pull-section").scrollIntoViewIfNeeded();
    expect(await axe(admin)).toEqual([]);
    // Nothing is wider than the phone's screen but the table's own scrolling region.
    const overflow = await admin.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    expect(overflow).toBe(0);
    await admin.screenshot({ path: join(SHOTS, "models-admin-390.png"), fullPage: true });
  }, 60_000);

  test("a non-admin sees the models but no pull section, and the pull API answers the page's own requests 403", async () => {
    const viewer = await browser.newPage({ viewport: { width: 390, height: 844 } });
    try {
      await viewer.goto(`${url}/console#/models`);
      await signIn(viewer, "viewer", "viewer-password-0123");
      await viewer.locator('#models-table tr[data-model-id="tiny-q4_k_m"]').waitFor();
      expect(await viewer.getByTestId("pull-section").count()).toBe(0);
      expect(await viewer.locator("select, progress").count()).toBe(0);
      expect(await viewer.locator("#models-table button").count()).toBe(0);
      // The pull code was never fetched.
      expect(await viewer.evaluate(() => performance.getEntriesByType("resource").some((r) => r.name.endsWith("/models-pull.js")))).toBe(false);
      const answers = await viewer.evaluate(async () => {
        const csrf = (await (await fetch("/console/api/session")).json()).csrf as string;
        const call = async (method: string, path: string, body?: unknown) => {
          const res = await fetch(path, { method, headers: { "content-type": "application/json", "x-csrf-token": csrf }, body: body === undefined ? undefined : JSON.stringify(body) });
          return [method, path, res.status, (await res.json()).error?.code];
        };
        return [
          await call("GET", "/console/api/admin/catalogue"),
          await call("GET", "/console/api/admin/pulls"),
          await call("POST", "/console/api/admin/pulls", { source: "hf:acme/Tiny-GGUF:Q4_K_M" }),
          await call("GET", "/console/api/admin/models/tiny-q4_k_m/plan"),
        ];
      });
      expect(answers).toEqual([
        ["GET", "/console/api/admin/catalogue", 403, "admin_only"],
        ["GET", "/console/api/admin/pulls", 403, "admin_only"],
        ["POST", "/console/api/admin/pulls", 403, "admin_only"],
        ["GET", "/console/api/admin/models/tiny-q4_k_m/plan", 403, "admin_only"],
      ]);
      expect(await axe(viewer)).toEqual([]);
      await viewer.screenshot({ path: join(SHOTS, "models-user-390.png"), fullPage: true });
    } finally {
      await viewer.close();
    }
  }, 60_000);
});
