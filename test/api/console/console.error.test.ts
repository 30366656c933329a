import { afterAll, beforeAll, expect, test } from "bun:test";
import { testApp, type TestApp } from "../../helpers/app";
import { consoleAccount, consoleClient, type ConsoleClient } from "./client";

// Bad input to the console API: a readable message in the API's error envelope, never a 500.

let t: TestApp;
let c: ConsoleClient;
beforeAll(async () => {
  t = testApp();
  const pw = await consoleAccount(t, "err-a");
  c = consoleClient(t);
  await c.signIn("err-a", pw);
});
afterAll(() => t.close());

async function expectError(res: Response, status: number, code: string | null, param?: string) {
  expect(res.status).toBe(status);
  const body = (await res.json()) as any;
  expect(body.error.code).toBe(code);
  expect(body.error.message.length).toBeGreaterThan(5);
  if (param) expect(body.error.param).toBe(param);
}

test("sign-in bodies", async () => {
  const fresh = consoleClient(t);
  await expectError(await fresh.call("POST", "/console/api/login", { account: "err-a" }), 400, null, "password");
  await expectError(await fresh.call("POST", "/console/api/login", { password: "x" }), 400, null, "account");
  await expectError(await fresh.call("POST", "/console/api/login", [1]), 400, null);
  const raw = await t.app.handle(new Request("http://localhost/console/api/login", { method: "POST", headers: { "content-type": "application/json" }, body: "{" }));
  await expectError(raw, 400, "invalid_json");
  await expectError(await fresh.call("GET", "/console/api/keys"), 401, "not_signed_in");
});

test("key settings", async () => {
  await expectError(await c.call("POST", "/console/api/keys", { kind: "gold" }), 400, null, "kind");
  await expectError(await c.call("POST", "/console/api/keys", { kind: "premium", name: "x".repeat(65) }), 400, null, "name");
  const { info } = await c.json("POST", "/console/api/keys", { kind: "free" });
  await expectError(await c.call("POST", "/console/api/keys", { kind: "free" }), 409, "conflict", "kind"); // one free key per account
  await expectError(await c.call("PATCH", `/console/api/keys/${info.id}`, { rental: "yes" }), 400, null, "rental");
  await expectError(await c.call("PATCH", `/console/api/keys/${info.id}`, { max_active_rentals: -1 }), 400, null, "max_active_rentals");
  await expectError(await c.call("PATCH", `/console/api/keys/${info.id}`, { max_active_rentals: 1.5 }), 400, null, "max_active_rentals");
  await c.json("POST", `/console/api/keys/${info.id}/revoke`);
  await expectError(await c.call("POST", `/console/api/keys/${info.id}/rotate`), 409, "conflict");
});

test("usage range, admin credit, unknown routes", async () => {
  await expectError(await c.call("GET", "/console/api/usage?days=0"), 400, null, "days");
  await expectError(await c.call("GET", "/console/api/usage?days=abc"), 400, null, "days");
  await expectError(await c.call("GET", "/console/api/nope"), 404, "not_found");
  const pw = await consoleAccount(t, "err-admin", { admin: true });
  const admin = consoleClient(t);
  await admin.signIn("err-admin", pw);
  await expectError(await admin.call("POST", "/console/api/admin/accounts/err-a/credit", { usd: -1 }), 400, null, "usd");
  await expectError(await admin.call("POST", "/console/api/admin/accounts/err-a/credit", { usd: "5" }), 400, null, "usd");
  await expectError(await admin.call("POST", "/console/api/admin/accounts/nobody/credit", { usd: 5 }), 404, "not_found");
  expect((await t.deps.accounts.getAccount("err-a")).balance_micros).toBe(0);
});

test("a session cookie with a bad percent-escape is no session, never a 500", async () => {
  for (const cookie of ["appliance_session=%", "appliance_session=%zz; appliance_device=%"]) {
    const res = await t.app.handle(new Request("http://localhost/console/api/session", { headers: { cookie } }));
    await expectError(res, 401, "not_signed_in");
  }
  const fresh = consoleClient(t);
  fresh.device = "appliance_device=%";
  expect((await fresh.signIn("err-a", "pw-err-a-0123456789")).status).toBe(200);
});

test("an unknown console path is a 404 in the JSON envelope, never a file's lookalike", async () => {
  for (const path of ["/console/nope.js", "/console/toString", "/console/__proto__", "/console/constructor", "/console/api", "/console/api/nope/deeper"]) {
    const res = await c.call("GET", path);
    expect({ path, type: res.headers.get("content-type") }).toEqual({ path, type: "application/json" });
    await expectError(res, 404, "not_found");
  }
  await expectError(await c.call("POST", "/console/api/keys/%ff/revoke"), 400, null, "id");
});
