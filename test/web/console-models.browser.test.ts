import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { ensureChatModel } from "../../models/cache";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { launchChromium, adminPasswordOf, signIn } from "../helpers/browser";
import { tempDir } from "../helpers/app";

// The console's Models page in a real browser (Debian's chromium through playwright-core) against
// the real server: each model's state, device, memory and idle time, and an admin loading and
// unloading a model from the page. A screenshot goes to test/output/console/models-loaded.png.

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
