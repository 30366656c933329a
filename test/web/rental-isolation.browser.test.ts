import { afterAll, beforeAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { rentalConfig, until } from "../api/rentals/setup";
import { launchChromium, adminPasswordOf, signIn } from "../helpers/browser";
import { endRentals, tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";

// A rental's notebook shares the appliance's origin (rentals.access = "proxy"): the renter's pages
// must not reach the console's signed-in session. Real Chromium, the real server over HTTPS (a
// certificate from `tls init`), the real process launcher running the stand-in notebook, which
// serves the renter's files under /rentals/{id}/files/ as Jupyter does. The admin is signed in to
// the console and opens a page the renter wrote; the page tries every way to read or act on the
// console, and a notebook's own traffic (its API, a WebSocket, a JSON import) must still work.
// Certificate trust is not what this test is about: the context ignores certificate errors
// (test/web/console-https.browser.test.ts trusts the CA for real).

const dir = tempDir("appliance-isolation-");
let server: RunningServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let adminPassword = "";

beforeAll(async () => {
  const init = cli(dir, ["tls", "init", "--json"]);
  expect(init.code).toBe(0);
  const j = init.json() as { cert: string; key: string };
  const config = validateConfig({
    server: { data_dir: dir, port: 0, tls: { cert: j.cert, key: j.key } },
    engines: { device: "cpu", threads: 1 },
    ...rentalConfig({ access: "proxy" }),
    models: [],
  });
  const banner: string[] = [];
  server = await startServer(config, { logger: memoryLogger(), banner: (l) => banner.push(l) });
  adminPassword = adminPasswordOf(banner);
  browser = await launchChromium();
  context = await browser.newContext({ ignoreHTTPSErrors: true });
  page = await context.newPage();
}, 120_000);

afterAll(async () => {
  await browser?.close();
  if (server) await endRentals(server.deps);
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The renter's page: each attempt records what it got; `done` when all have run. */
const EVIL = `<!doctype html><meta charset="utf-8"><title>a notebook output</title>
<form id="f" method="post" action="/console/api/keys" target="_blank"><input name="name" value="stolen"></form>
<script>
window.results = {}; window.violations = [];
document.addEventListener("securitypolicyviolation", (e) => violations.push(e.effectiveDirective));
const own = location.pathname.slice(0, location.pathname.indexOf("files/"));
const attempt = async (name, fn) => { try { results[name] = await fn(); } catch (e) { results[name] = "refused"; } };
const settle = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  // The notebook's own traffic works.
  await attempt("own_api", async () => (await fetch(own + "api")).status);
  await attempt("own_json_import", async () => (await import(own + "files/data.json", { with: { type: "json" } })).default.ok);
  await attempt("own_websocket", () => new Promise((resolve, reject) => {
    const ws = new WebSocket(location.origin.replace("https", "wss") + own + "api/kernels/k1/channels");
    ws.onopen = () => ws.send("ping"); ws.onmessage = (e) => { resolve(e.data); ws.close(); }; ws.onerror = () => reject(new Error("ws"));
  }));
  // The console's session, as whoever opened this page.
  await attempt("fetch_session", async () => (await (await fetch("/console/api/session")).json()).csrf ? "read" : "no csrf");
  await attempt("fetch_keys_via_dotdot", async () => (await fetch(own + "..%2f..%2fconsole/api/keys")).status);
  await attempt("json_import", async () => (await import("/console/api/session", { with: { type: "json" } })).default.csrf ? "read" : "no csrf");
  await attempt("script_tag", () => new Promise((resolve) => { const s = document.createElement("script"); s.src = "/console/api/session"; s.onload = () => resolve("loaded"); s.onerror = () => resolve("refused"); document.body.append(s); }));
  await attempt("worker", () => new Promise((resolve) => { try { const w = new Worker("/console/app.js"); w.onerror = () => resolve("refused"); setTimeout(() => resolve("started"), 500); } catch { resolve("refused"); } }));
  await attempt("iframe", () => new Promise((resolve) => { const f = document.createElement("iframe"); f.src = "/health"; f.onload = () => { let doc = null; try { doc = f.contentDocument; } catch {} resolve(doc && doc.body && doc.body.textContent.includes("ok") ? "readable" : "refused"); }; document.body.append(f); }));
  await attempt("popup", async () => {
    const w = window.open("/console", "_blank");
    if (!w) return "refused";
    for (let i = 0; i < 40; i++) { await settle(100); try { if (w.document.readyState === "complete" && w.location.pathname.startsWith("/console")) break; } catch { break; } }
    try { return (await (await w.fetch("/console/api/session")).json()).csrf ? "read" : "no csrf"; } catch { return "refused"; }
  });
  await attempt("form_post", async () => { document.getElementById("f").submit(); await settle(500); return "submitted"; });
  window.done = true;
})();
</script>`;

test("a page the renter serves on /rentals/{id}/ cannot read or act on the console a signed-in admin holds; the notebook's own fetches, imports and WebSocket still work", async () => {
  // The admin signs in to the console.
  await page.goto(`${server.url}/console`);
  await signIn(page, "admin", adminPassword);
  await page.locator("#keys-table").waitFor();
  const session = await page.evaluate(async () => (await fetch("/console/api/session")).status);
  expect(session).toBe(200); // the session the renter's page is after is there
  const keysBefore = (await server.deps.accounts.listKeys("admin")).length;

  // A renter (another account) rents a GPU and writes a page into the notebook's files.
  await server.deps.accounts.createAccount("mallory", { role: "user", creditMicros: 5_000_000, note: "test" });
  const { key } = await server.deps.accounts.createKey({ account: "mallory", kind: "premium", name: "renter", scopes: ["inference", "rental"] });
  const call = (method: string, path: string, body?: unknown) =>
    fetch(`${server.url}${path}`, { method, tls: { rejectUnauthorized: false }, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, ...(body ? { body: JSON.stringify(body) } : {}) } as RequestInit).then((r) => r.json() as Promise<any>);
  const node = (await call("GET", "/api/v1/gpus")).data[0].node_id;
  const created = await call("POST", "/api/v1/rentals", { node_id: node, type: "jupyter" });
  const r = await until(() => call("GET", `/api/v1/rentals/${created.rental_id}`), (x) => x.status === "running");
  expect(r.status).toBe("running");
  const workDir = join(dir, "rentals", r.rental_id);
  writeFileSync(join(workDir, "evil.html"), EVIL);
  writeFileSync(join(workDir, "data.json"), JSON.stringify({ ok: "own data" }));

  // The admin opens the link the renter sent.
  await page.goto(`${server.url}/rentals/${r.rental_id}/files/evil.html?token=${r.connection.token}`);
  await page.waitForFunction(() => (window as any).done === true, null, { timeout: 20_000 });
  const { results, violations } = await page.evaluate(() => ({ results: (window as any).results, violations: (window as any).violations as string[] }));

  expect(results.own_api).toBe(200);
  expect(results.own_json_import).toBe("own data");
  expect(results.own_websocket).toBe("echo:ping");

  expect(results.fetch_session).toBe("refused");
  expect(results.json_import).toBe("refused");
  expect(results.script_tag).toBe("refused");
  expect(results.worker).toBe("refused");
  expect(results.iframe).toBe("refused");
  expect(results.popup).toBe("refused");
  // The browser refused these on the page's policy, not by chance.
  for (const d of ["connect-src", "script-src-elem", "worker-src", "frame-src", "form-action"]) expect(violations).toContain(d);
  // A path that leaves the rental only after the server decodes it stays the notebook's: it never reaches the console.
  expect(results.fetch_keys_via_dotdot).toBe(404);
  // The form never reached the console: no key was made.
  expect((await server.deps.accounts.listKeys("admin")).length).toBe(keysBefore);
}, 90_000);
