import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { ensureChatModel } from "../../models/cache";
import { validateConfig } from "../../src/config";
import { memoryLogger } from "../../src/log";
import { startServer, type RunningServer } from "../../src/main";
import { tempDir } from "../helpers/app";

// The web console in a real browser (Debian's chromium, driven by playwright-core) against the
// real server over HTTP, signed in with the admin password the first start printed. Screenshots
// of the main pages go to test/output/console/.

const CHROMIUM = process.env.APPLIANCE_CHROMIUM ?? "/usr/bin/chromium";
const SHOTS = join(import.meta.dir, "..", "output", "console");
const dir = tempDir("appliance-console-");
let server: RunningServer;
let browser: Browser;
let page: Page;
let adminPassword: string;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  const chat = await ensureChatModel("chat");
  const config = validateConfig({
    server: { data_dir: dir, port: 0 },
    rentals: { discover: false },
    engines: { device: "cpu", threads: 1 },
    models: [{ id: "chat", name: "Tiny chat", kind: "chat", files: { model: chat }, max_context: 2048, slots: 1, load: "start" }],
  });
  const banner: string[] = [];
  server = await startServer(config, { logger: memoryLogger(), banner: (l) => banner.push(l) });
  adminPassword = /password ([0-9A-Za-z]{20})/.exec(banner.join("\n"))![1]!;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
const api = (path: string, key: string, init: RequestInit = {}) => fetch(server.url + path, { ...init, headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...init.headers } });

async function eventually<T>(fn: () => Promise<T>, ok: (v: T) => boolean, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (ok(v) || Date.now() > end) return v;
    await Bun.sleep(100);
  }
}

async function signIn(account: string, password: string) {
  await page.getByLabel("Account").fill(account);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
}

test("a wrong password is refused with a readable message", async () => {
  await page.goto(`${server.url}/console`);
  await shot("sign-in");
  await signIn("admin", "not-the-password");
  const alert = page.getByRole("alert");
  await alert.waitFor();
  expect(await alert.textContent()).toContain("wrong account or password");
  expect(await alert.textContent()).not.toContain("{");
}, 30_000);

test("sign in, create a key and use it, toggle its rental scope, revoke it and see it refused", async () => {
  await signIn("admin", adminPassword);
  await page.locator("#keys-table").waitFor();
  expect(await eventually(async () => (await page.locator("#balance").textContent()) ?? "", (t) => t.includes("$"))).toContain("$10");

  await page.locator("#key-name").fill("browser key");
  await page.locator("#key-kind").selectOption("premium");
  await page.getByRole("button", { name: "Create key" }).click();
  const shown = page.locator("#new-key");
  await shown.waitFor();
  const key = ((await shown.inputValue().catch(() => null)) ?? (await shown.textContent()) ?? "").trim();
  expect(key).toMatch(/^sk-apl-[0-9A-Za-z]{44}$/);
  await shot("keys");
  expect((await api("/v1/models", key)).status).toBe(200);
  expect((await api("/api/v1/gpus", key)).status).toBe(403);

  const id = (await server.deps.accounts.authenticate(key))!.keyId;
  const row = page.locator(`#keys-table tr[data-key-id="${id}"]`);
  await row.locator(".rental-toggle").check();
  expect(await eventually(async () => (await api("/api/v1/gpus", key)).status, (s) => s === 200)).toBe(200);

  page.once("dialog", (d) => d.accept());
  await row.getByRole("button", { name: "Revoke" }).click();
  expect(await eventually(async () => (await row.textContent()) ?? "", (t) => t.includes("revoked"))).toContain("revoked");
  expect((await api("/v1/models", key)).status).toBe(401);
}, 60_000);

test("usage shows a chat request made with a key", async () => {
  const { key } = server.deps.accounts.createKey({ account: "admin", kind: "premium", name: "usage" });
  const res = await api("/v1/chat/completions", key, { method: "POST", body: JSON.stringify({ model: "chat", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }) });
  expect(res.status).toBe(200);
  await page.goto(`${server.url}/console#/usage`);
  const recent = page.locator("#recent-table");
  expect(await eventually(async () => (await recent.textContent()) ?? "", (t) => t.includes("/v1/chat/completions"))).toContain("/v1/chat/completions");
  expect(await recent.textContent()).toContain("chat");
  await page.locator("#usage-chart").waitFor();
  await shot("usage");
  for (const [route, name] of [["#/batches", "batches"], ["#/rentals", "rentals"], ["#/models", "models"], ["#/playground", "playground"], ["#/admin", "admin"]] as const) {
    await page.goto(`${server.url}/console${route}`);
    await page.waitForLoadState("networkidle");
    await shot(name);
  }
  expect(await page.locator("#accounts-table").textContent()).toContain("admin");
}, 60_000);

test("the playground streams a chat answer with one's own key", async () => {
  const { key } = server.deps.accounts.createKey({ account: "admin", kind: "premium", name: "playground" });
  const before = (server.deps.db.query("SELECT COUNT(*) AS n FROM usage WHERE endpoint = '/v1/chat/completions'").get() as { n: number }).n;
  await page.goto(`${server.url}/console#/playground`);
  await page.getByLabel("API key").fill(key);
  await page.locator("#pg-model").selectOption("chat");
  await page.getByLabel("Prompt", { exact: true }).fill("Say something.");
  await page.getByRole("button", { name: "Send" }).click();
  const done = await eventually(async () => (await page.getByText("Done.").count()) > 0 || (await page.locator("#pg-error").isVisible().catch(() => false)), (v) => v, 30_000);
  expect(done).toBe(true);
  expect(await page.locator("#pg-error").isVisible().catch(() => false)).toBe(false);
  const streamed = ((await page.locator("#pg-answer").textContent()) ?? "") + ((await page.locator("#pg-reasoning").textContent().catch(() => "")) ?? "");
  expect(streamed.length).toBeGreaterThan(0);
  const after = (server.deps.db.query("SELECT COUNT(*) AS n FROM usage WHERE endpoint = '/v1/chat/completions'").get() as { n: number }).n;
  expect(after).toBe(before + 1);
  await shot("playground-chat");
}, 60_000);
