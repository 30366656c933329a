import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
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

// The console's Models page in a real browser (Debian's chromium through playwright-core) against
// the real server: each model's state, device, memory and idle time, and an admin loading and
// unloading a model from the page. A screenshot goes to test/output/console/models-loaded.png.
// On a cluster (issue 45: a PostgreSQL store, a second real node beside it) the page lists every
// node's models with a Node column and each one's price (the other node's from its heartbeat) —
// test/output/console/models-cluster.png.

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
