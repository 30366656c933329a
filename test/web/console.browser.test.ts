import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { ensureChatModel } from "../../models/cache";
import { ensureDiffusionModel } from "../../models/diffusion/cache";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { launchChromium, adminPasswordOf, signIn as signInWith, axeViolations, strayTexts } from "../helpers/browser";
import { endRentals, tempDir } from "../helpers/app";
import { processesOf, rentalConfig } from "../api/rentals/setup";

// The web console in a real browser (Debian's chromium, driven by playwright-core) against the
// real server over HTTP, signed in with the admin password the first start printed. Screenshots
// of the main pages go to test/output/console/.

const SHOTS = join(import.meta.dir, "..", "output", "console");
const dir = tempDir("appliance-console-");
let server: RunningServer;
let browser: Browser;
let page: Page;
let adminPassword: string;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  const chat = await ensureChatModel("chat");
  const turbo = ensureDiffusionModel("diffusion-turbo");
  const config = validateConfig({
    server: { data_dir: dir, port: 0 },
    ...rentalConfig(),
    engines: { device: "cpu", threads: 1 },
    models: [
      { id: "chat", name: "Tiny chat", kind: "chat", files: { model: chat }, max_context: 2048, slots: 1, load: "start" },
      { id: "turbo", name: "Tiny turbo", kind: "image", files: { model: turbo }, max_context: 77, slots: 1, load: "first_use" },
    ],
  });
  const banner: string[] = [];
  server = await startServer(config, { logger: memoryLogger(), banner: (l) => banner.push(l) });
  adminPassword = adminPasswordOf(banner);
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  if (server) await endRentals(server.deps);
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

const signIn = (account: string, password: string) => signInWith(page, account, password);

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
  const { key } = await server.deps.accounts.createKey({ account: "admin", kind: "premium", name: "usage" });
  const res = await api("/v1/chat/completions", key, { method: "POST", body: JSON.stringify({ model: "chat", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }) });
  expect(res.status).toBe(200);
  // The page keeps to its own CSP (issue 41): no violation reported, by the page's event or the console.
  const violations: string[] = [];
  page.on("console", (m) => void (/content security policy|csp violation/i.test(m.text()) && violations.push(m.text())));
  await page.addInitScript(() =>
    document.addEventListener("securitypolicyviolation", (e) => console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI} ${e.sample}`)),
  );
  await page.goto(`${server.url}/console#/usage`);
  await page.reload(); // a fresh document, which the init script above runs in
  const recent = page.locator("#recent-table");
  expect(await eventually(async () => (await recent.textContent()) ?? "", (t) => t.includes("/v1/chat/completions"))).toContain("/v1/chat/completions");
  expect(await recent.textContent()).toContain("chat");
  await page.locator("#usage-chart").waitFor();
  await page.locator("#usage-chart .legend").waitFor();
  expect(violations).toEqual([]);
  // The legend's swatches carry their series' colours.
  const swatches = page.locator("#usage-chart .legend .swatch");
  expect(await swatches.count()).toBeGreaterThan(0);
  expect(await swatches.first().evaluate((el) => getComputedStyle(el).backgroundColor)).not.toBe("rgba(0, 0, 0, 0)");
  await page.locator("#usage-split").selectOption("endpoint"); // redrawn
  expect(await swatches.first().evaluate((el) => getComputedStyle(el).backgroundColor)).not.toBe("rgba(0, 0, 0, 0)");
  expect(violations).toEqual([]);
  await shot("usage");
  for (const [route, name] of [["#/batches", "batches"], ["#/rentals", "rentals"], ["#/models", "models"], ["#/playground", "playground"], ["#/chat", "chat"], ["#/admin", "admin"]] as const) {
    await page.goto(`${server.url}/console${route}`);
    await page.waitForLoadState("networkidle");
    await shot(name);
  }
  expect(await page.locator("#accounts-table").textContent()).toContain("admin");
  expect(violations).toEqual([]); // on the other pages either
}, 60_000);

test("the Chat page streams an answer as the signed-in account, with no key pasted, billed to the account", async () => {
  const before = (server.deps.db!.query("SELECT COUNT(*) AS n FROM usage WHERE endpoint = '/v1/chat/completions'").get() as { n: number }).n;
  const balance = (await server.deps.accounts.getAccount("admin")).balance_micros;
  await page.goto(`${server.url}/console#/chat`);
  await page.locator("#chat-model").selectOption("chat");
  await page.locator("#chat-input").fill("Say something.");
  await page.getByRole("button", { name: "Send" }).click();
  const done = await eventually(async () => (await page.locator("#chat-status").textContent()) === "Done." || (await page.locator("#chat-error").isVisible().catch(() => false)), (v) => v, 30_000);
  expect(done).toBe(true);
  expect(await page.locator("#chat-error").isVisible().catch(() => false)).toBe(false);
  await page.locator("#chat-log .msg-assistant .msg-meta:not(:empty)").waitFor();
  const after = (server.deps.db!.query("SELECT COUNT(*) AS n FROM usage WHERE endpoint = '/v1/chat/completions'").get() as { n: number }).n;
  expect(after).toBe(before + 1);
  const row = server.deps.db!.query("SELECT u.cost_micros, k.purpose FROM usage u JOIN api_keys k ON k.id = u.key_id ORDER BY u.id DESC LIMIT 1").get() as { cost_micros: number; purpose: string };
  expect(row.purpose).toBe("console");
  expect((await server.deps.accounts.getAccount("admin")).balance_micros).toBe(balance - row.cost_micros);
  await shot("chat-answer");
}, 60_000);

const jsonl = (lines: unknown[]) => lines.map((l) => JSON.stringify(l)).join("\n") + "\n";

async function createBatch(key: string, lines: number, maxTokens: number): Promise<string> {
  const form = new FormData();
  form.append("purpose", "batch");
  const body = Array.from({ length: lines }, (_, i) => ({ custom_id: `r${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "chat", messages: [{ role: "user", content: `line ${i}` }], max_tokens: maxTokens } }));
  form.append("file", new File([jsonl(body)], "in.jsonl"));
  const file = (await (await fetch(`${server.url}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form })).json()) as { id: string };
  const batch = (await (await api("/v1/batches", key, { method: "POST", body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }) })).json()) as { id: string };
  return batch.id;
}

test("batches: a finished batch shows full progress and its output downloads; a running one is cancelled", async () => {
  const { key } = await server.deps.accounts.createKey({ account: "admin", kind: "premium", name: "batches" });
  const done = await createBatch(key, 2, 4);
  const status = (id: string) => api(`/v1/batches/${id}`, key).then((r) => r.json() as Promise<any>);
  expect((await eventually(() => status(done), (b) => b.status === "completed", 60_000)).status).toBe("completed");

  await page.goto(`${server.url}/console#/batches`);
  const row = page.locator(`#batches-table tr[data-batch-id="${done}"]`);
  await row.waitFor();
  expect(await row.textContent()).toContain("2 of 2");
  expect(await row.locator("progress").getAttribute("aria-label")).toContain("2 of 2");
  const [download] = await Promise.all([page.waitForEvent("download"), row.getByRole("link", { name: "Output" }).click()]);
  const lines = readFileSync((await download.path())!, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  expect(lines.map((l) => l.custom_id).sort()).toEqual(["r0", "r1"]);
  expect(lines[0].response.status_code).toBe(200);

  const running = await createBatch(key, 200, 64);
  await page.reload();
  const runningRow = page.locator(`#batches-table tr[data-batch-id="${running}"]`);
  await runningRow.getByRole("button", { name: "Cancel" }).click();
  await page.getByText(`Cancellation requested for batch ${running}.`).waitFor();
  const ended = await eventually(() => status(running), (b) => b.status === "cancelled", 60_000);
  expect(ended.status).toBe("cancelled");
  expect(ended.request_counts.completed).toBeLessThan(200);
  await page.reload();
  expect(await eventually(async () => (await runningRow.textContent()) ?? "", (t) => t.includes("cancelled"))).toContain("cancelled");
  expect(await runningRow.getByRole("button", { name: "Cancel" }).count()).toBe(0);
  await shot("batches-used");
}, 150_000);

test("rentals: a running rental shows live status and a JupyterLab link that opens, and is stopped from the browser", async () => {
  const { key } = await server.deps.accounts.createKey({ account: "admin", kind: "premium", name: "rentals", scopes: ["inference", "rental"] });
  await page.goto(`${server.url}/console#/rentals`);
  const gpuRow = page.locator("#gpus-table tbody tr").first();
  expect(await gpuRow.textContent()).toContain("NVIDIA GeForce RTX 4090");
  const nodeId = (await gpuRow.getAttribute("data-row"))!;
  const created = (await (await api("/api/v1/rentals", key, { method: "POST", body: JSON.stringify({ node_id: nodeId, type: "jupyter" }) })).json()) as { rental_id: string };
  const row = page.locator(`#rentals-table tr[data-rental-id="${created.rental_id}"]`);
  // One reload shows the new (pending) rental; while it is active the page polls, so it turns running by itself.
  await page.reload();
  const link = row.getByRole("link", { name: "Open JupyterLab" });
  await link.waitFor({ timeout: 30_000 });
  expect(await row.textContent()).toContain("running");
  await shot("rentals-running");
  const [lab] = await Promise.all([page.context().waitForEvent("page"), link.click()]);
  await lab.waitForLoadState();
  expect(JSON.parse((await lab.textContent("body")) ?? "{}")).toMatchObject({ lab: true, gpus: expect.any(String) });
  await lab.close();

  await row.getByRole("button", { name: "Stop" }).click();
  expect(await eventually(async () => (await row.textContent()) ?? "", (t) => t.includes("stopped"), 20_000)).toContain("stopped");
  expect(await row.textContent()).toContain("user");
  expect(await row.getByRole("link", { name: "Open JupyterLab" }).count()).toBe(0);
  expect(processesOf(created.rental_id)).toEqual([]);
}, 60_000);

test("the Chat page generates an image with an image model, kept with the conversation", async () => {
  await page.goto(`${server.url}/console#/chat`);
  await page.locator("#chat-new").click();
  await page.locator("#chat-model").selectOption("turbo");
  await page.locator("#chat-settings > summary").click();
  await page.locator("#img-size").selectOption("256x256");
  await page.locator("#chat-input").fill("a red square");
  await page.locator("#chat-input").press("Enter");
  const img = page.locator("#chat-log .msg-assistant img");
  await img.waitFor({ timeout: 60_000 });
  const size = await img.evaluate((el: HTMLImageElement) => el.decode().then(() => [el.naturalWidth, el.naturalHeight]));
  expect(size).toEqual([256, 256]);
  const used = server.deps.db!.query("SELECT COUNT(*) AS n FROM usage WHERE endpoint = '/v1/images/generations'").get() as { n: number };
  expect(used.n).toBe(1);
  await page.reload();
  await page.locator("#chat-log .msg-assistant img").waitFor({ timeout: 30_000 });
  await shot("chat-image");
}, 90_000);




// Issue 42: with no usage the Usage page printed "null" under its charts (a null child appended as text).
test("no page prints a null, undefined or NaN child as text: the Usage page with no data, and every page with data", async () => {
  await page.goto(`${server.url}/console#/keys`);
  await page.locator("#view > *").first().waitFor();
  await page.route("**/console/api/usage*", (route) => route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify({ days: [], recent: [] }) }));
  await page.goto(`${server.url}/console#/usage`);
  await page.locator("#usage-chart:not([aria-busy])").waitFor();
  expect(await strayTexts(page)).toEqual([]);
  await page.unroute("**/console/api/usage*");
  for (const route of ["chat", "keys", "usage", "batches", "rentals", "models", "playground", "docs", "admin"]) {
    await page.goto(`${server.url}/console#/${route}`);
    await page.waitForLoadState("networkidle");
    await page.locator("#view > *").first().waitFor();
    expect({ route, stray: await strayTexts(page) }).toEqual({ route, stray: [] });
  }
}, 60_000);

test("every page passes axe-core's WCAG 2.1 A/AA rules and the console works from the keyboard alone", async () => {
  await page.goto(`${server.url}/console#/keys`);
  await page.locator("#sign-out").click();
  await page.locator("#signin-form").waitFor();
  expect(await axeViolations(page)).toEqual([]);

  // Keyboard only: the account field has focus, Tab moves to the password, Enter submits.
  expect(await page.evaluate(() => document.activeElement?.id)).toBe("account");
  await page.keyboard.type("admin");
  await page.keyboard.press("Tab");
  await page.keyboard.type(adminPassword);
  await page.keyboard.press("Enter");
  await page.locator("#keys-table").waitFor();
  // From a fresh load, Tab reaches the skip link first, then the navigation; Enter follows a link.
  await page.reload();
  await page.locator("#keys-table").waitFor();
  await page.keyboard.press("Tab");
  expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Skip to content");
  let reached = "";
  for (let i = 0; i < 10 && reached !== "Usage"; i++) {
    await page.keyboard.press("Tab");
    reached = (await page.evaluate(() => document.activeElement?.textContent)) ?? "";
  }
  expect(reached).toBe("Usage");
  await page.keyboard.press("Enter");
  expect(await eventually(async () => (await page.locator("#page-title").textContent()) ?? "", (t) => t === "Usage")).toBe("Usage");

  // Every page at a phone's width and a desktop's (issue 48): no violation, nothing wider than the window; a screenshot of each.
  for (const width of [390, 1440]) {
    await page.setViewportSize({ width, height: 900 });
    for (const route of ["chat", "keys", "usage", "batches", "rentals", "models", "playground", "docs", "admin"]) {
      await page.goto(`${server.url}/console#/${route}`);
      await page.waitForLoadState("networkidle");
      await page.locator("#view > *").first().waitFor();
      expect({ route, width, violations: await axeViolations(page) }).toEqual({ route, width, violations: [] });
      expect({ route, width, overflow: await page.evaluate(() => document.documentElement.scrollWidth > innerWidth) }).toEqual({ route, width, overflow: false });
      await shot(`page-${route}-${width}`);
    }
  }
  await page.setViewportSize({ width: 1200, height: 900 });
}, 180_000);
