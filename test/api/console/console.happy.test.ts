import { afterAll, beforeAll, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { CONSOLE_FILES } from "../../../src/1-api/console/assets";
import { testApp, type TestApp } from "../../helpers/app";
import { consoleAccount, consoleClient } from "./client";

// The console API as the page uses it: sign in, keys (create, use, scope, caps, rotate, revoke),
// balance, models, admin credit, sign out.

let t: TestApp;
beforeAll(() => {
  t = testApp();
});
afterAll(() => t.close());

test("sign in, create a key shown once, use it on /v1/models, toggle the rental scope, cap rentals, rotate, revoke", async () => {
  const password = await consoleAccount(t, "alice", { creditUsd: 3 });
  const c = consoleClient(t);
  const login = await c.signIn("alice", password);
  expect(login.status).toBe(200);
  expect(await login.json()).toMatchObject({ account: { name: "alice", role: "user" } });
  expect(login.headers.get("cache-control")).toBe("no-store");
  expect(await c.json("GET", "/console/api/session")).toMatchObject({ account: { name: "alice" }, csrf: c.csrf });
  expect(await c.json("GET", "/console/api/account")).toMatchObject({ name: "alice", balance_usd: 3, trial_tokens_remaining: 250000 });

  const made = await c.json("POST", "/console/api/keys", { kind: "premium", name: "laptop", rental: false });
  expect(made.key).toMatch(/^sk-apl-[0-9A-Za-z]{44}$/);
  expect(made.info).toMatchObject({ kind: "premium", name: "laptop", scopes: ["inference"], display: `sk-apl-…${made.key.slice(-4)}`, revoked_at: null });
  const listed = (await c.json("GET", "/console/api/keys")).data;
  expect(listed).toHaveLength(1);
  expect(JSON.stringify(listed)).not.toContain(made.key); // shown once, never listed
  const models = () => t.request("GET", "/v1/models", { key: made.key });
  expect((await models()).status).toBe(200);
  expect((await t.request("GET", "/api/v1/gpus", { key: made.key })).status).toBe(403);

  expect((await c.json("PATCH", `/console/api/keys/${made.info.id}`, { rental: true })).info.scopes).toEqual(["inference", "rental"]);
  expect((await t.request("GET", "/api/v1/gpus", { key: made.key })).status).toBe(200);
  expect((await c.json("PATCH", `/console/api/keys/${made.info.id}`, { max_active_rentals: 3 })).info.max_active_rentals).toBe(3);
  expect((await t.deps.accounts.authenticate(made.key))!.maxActiveRentals).toBe(3);

  const rotated = await c.json("POST", `/console/api/keys/${made.info.id}/rotate`);
  expect(rotated.key).not.toBe(made.key);
  expect(rotated.info.scopes).toEqual(["inference", "rental"]);
  expect((await models()).status).toBe(401);
  expect((await t.request("GET", "/v1/models", { key: rotated.key })).status).toBe(200);

  const revoked = await c.json("POST", `/console/api/keys/${rotated.info.id}/revoke`);
  expect(revoked.info.revoked_at).not.toBeNull();
  const refused = await t.request("GET", "/v1/models", { key: rotated.key });
  expect(refused.status).toBe(401);

  expect((await c.json("POST", "/console/api/logout")).ok).toBe(true);
  expect((await c.call("GET", "/console/api/session")).status).toBe(401);
});

test("the console page and its assets are served by the appliance, with a strict CSP and no CDN", async () => {
  const page = await t.app.handle(new Request("http://localhost/console"));
  expect(page.status).toBe(200);
  expect(page.headers.get("content-type")).toStartWith("text/html");
  expect(page.headers.get("content-security-policy")).toContain("default-src 'self'");
  const html = await page.text();
  expect(html).not.toMatch(/https?:\/\//); // every asset from this server
  for (const asset of html.match(/\/console\/[\w.-]+\.(?:js|css)/g) ?? []) expect((await t.app.handle(new Request(`http://localhost${asset}`))).status).toBe(200);
  // Every file of web/ is embedded (src/1-api/console/assets.ts lists them by import); web/docs/ holds the reference pages.
  const files = readdirSync(join(import.meta.dir, "../../../web"), { withFileTypes: true }).filter((f) => f.isFile());
  expect([...CONSOLE_FILES].sort()).toEqual(files.map((f) => f.name).sort());
  const root = await t.app.handle(new Request("http://localhost/"));
  expect(root.status).toBe(302);
  expect(root.headers.get("location")).toBe("/console");
});

test("admin: every account, and credit one; models listed for the playground", async () => {
  const password = await consoleAccount(t, "root", { admin: true });
  await consoleAccount(t, "bob");
  const c = consoleClient(t);
  await c.signIn("root", password);
  const accounts = (await c.json("GET", "/console/api/admin/accounts")).data;
  expect(accounts.map((a: any) => a.name)).toEqual(expect.arrayContaining(["alice", "bob", "root"]));
  expect(await c.json("POST", "/console/api/admin/accounts/bob/credit", { usd: 2.5 })).toMatchObject({ name: "bob", balance_usd: 2.5 });
  expect((await t.deps.accounts.getAccount("bob")).balance_micros).toBe(2_500_000);
  expect(await c.json("GET", "/console/api/models")).toEqual({ data: [] });
});
