import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Page } from "playwright-core";
import type { RunningServer } from "../../src/main";
import { bareConsole, type BareConsole } from "../helpers/bare-console";
import { adminPasswordOf, signIn } from "../helpers/browser";

// The manual in a real browser (issue 43): the Docs page lists web/docs/'s pages, shows one, follows
// a link to another page and a link to a heading (scrolled into view), and a tree the server never
// writes (a script, an event attribute, a javascript: link) builds no such element. Screenshot:
// test/output/console/docs.png.

const SHOTS = join(import.meta.dir, "..", "output", "console");
let c: BareConsole;
let server: RunningServer;
let page: Page;
let errors: string[];

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  c = await bareConsole("appliance-console-docs-", { viewport: { width: 1300, height: 800 } });
  ({ server, page, errors } = c);
  // Failed requests by URL (the sign-in page's session check is a 401 before signing in).
  page.on("response", (r) => void (r.status() >= 400 && !r.url().endsWith("/favicon.ico") && errors.push(`${r.status()} ${r.url()}`)));
  await page.goto(`${server.url}/console#/docs`);
  await signIn(page, "admin", adminPasswordOf(c.banner));
  errors.length = 0;
}, 60_000);

afterAll(() => c?.close());

const shown = () => page.locator("article#doc:not([aria-busy])");

test("the contents, a link to another page, and a link to a heading of it", async () => {
  await shown().waitFor();
  expect(await shown().locator("h1").textContent()).toBe("The appliance's manual");
  expect(await page.locator(".doc-nav a").count()).toBeGreaterThan(10);
  expect(await page.locator('.doc-nav a[aria-current="page"]').textContent()).toBe("The appliance's manual");

  await shown().locator('a[href="#/docs/configuration"]').first().click();
  await page.waitForFunction(() => document.querySelector("article#doc:not([aria-busy]) h1")?.textContent === "Configuration");
  expect(page.url()).toEndWith("#/docs/configuration");
  // Fenced code stays code, tables stay tables.
  expect(await shown().locator("pre code").count()).toBeGreaterThan(0);
  expect(await shown().locator("table").count()).toBeGreaterThan(0);

  // A link to a heading of another page: the page opens at that heading.
  await page.goto(`${server.url}/console#/docs/api/errors`);
  await page.waitForFunction(() => document.querySelector("article#doc:not([aria-busy]) h1")?.textContent?.startsWith("API: keys"));
  const heading = page.locator("#doc-errors");
  expect(await heading.textContent()).toBe("Errors");
  const box = await heading.boundingBox();
  expect(box!.y).toBeGreaterThanOrEqual(0);
  expect(box!.y).toBeLessThan(800);
  await page.screenshot({ path: join(SHOTS, "docs.png") });
  expect(errors).toEqual([]);
}, 60_000);

test("a tree with a script, an event attribute or a javascript: link builds none of them", async () => {
  const hostile = {
    name: "index",
    title: "x",
    tree: [
      ["h1", { id: "doc-x" }, "Hostile"],
      ["script", {}, "window.__owned = 1"],
      ["img", { src: "x", onerror: "window.__owned = 2" }],
      ["p", { onclick: "window.__owned = 3" }, ["a", { href: "javascript:window.__owned=4" }, "link"]],
    ],
  };
  await page.route("**/console/api/docs/index", (r) => r.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify(hostile) }));
  await page.goto(`${server.url}/console#/docs`);
  await page.reload();
  await page.waitForFunction(() => document.querySelector("article#doc:not([aria-busy]) h1")?.textContent === "Hostile");
  const found = await page.evaluate(() => ({
    scripts: document.querySelectorAll("article#doc script, article#doc img").length,
    handlers: Array.from(document.querySelectorAll("article#doc *")).filter((e) => Array.from(e.attributes).some((a) => a.name.startsWith("on"))).length,
    hrefs: Array.from(document.querySelectorAll("article#doc a")).map((a) => a.getAttribute("href")),
  }));
  expect(found).toEqual({ scripts: 0, handlers: 0, hrefs: [null] });
  await page.locator("article#doc a").click();
  expect(await page.evaluate(() => (window as any).__owned)).toBeUndefined();
  await page.unroute("**/console/api/docs/index");
}, 60_000);
