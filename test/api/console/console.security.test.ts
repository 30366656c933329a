import { afterAll, beforeAll, expect, test } from "bun:test";
import { ManualClock } from "../../../src/clock";
import { SESSION_IDLE_MS } from "../../../src/console/auth";
import { BASE, testApp, type TestApp } from "../../helpers/app";
import { consoleAccount, consoleClient } from "./client";

// Sessions, not keys; one account's session cannot touch another's resources; CSRF and
// cross-site requests refused; passwords hashed. Sign-in throttling: console.signin.test.ts.

const clock = new ManualClock(Date.UTC(2026, 10, 1));
let t: TestApp;
beforeAll(() => {
  t = testApp({ clock });
});
afterAll(() => t.close());

const code = async (res: Response) => ((await res.json()) as any).error.code;

test("a session cannot read or act on another account's keys, batches, files or rentals", async () => {
  const pa = await consoleAccount(t, "sec-a");
  await consoleAccount(t, "sec-b");
  const b = t.deps.accounts.createKey({ account: "sec-b", kind: "premium" });
  const a = consoleClient(t);
  await a.signIn("sec-a", pa);
  for (const [method, path, body] of [
    ["POST", `/console/api/keys/${b.info.id}/revoke`],
    ["POST", `/console/api/keys/${b.info.id}/rotate`],
    ["PATCH", `/console/api/keys/${b.info.id}`, { rental: true }],
    ["POST", `/console/api/keys/${b.key}/revoke`], // a full key is not a reference here either
    ["POST", "/console/api/batches/batch_x/cancel"],
    ["GET", "/console/api/files/file-x/content"],
    ["POST", "/console/api/rentals/rent_x/stop"],
  ] as const) {
    const res = await a.call(method, path, body);
    expect(res.status).toBe(404);
  }
  expect(t.deps.accounts.getKey(b.info.id)).toMatchObject({ revoked_at: null, scopes: ["inference"] });
  expect((await a.json("GET", "/console/api/keys")).data).toEqual([]);
  expect((await a.call("GET", "/console/api/admin/accounts")).status).toBe(403);
  expect(await code(await a.call("POST", "/console/api/admin/accounts/sec-a/credit", { usd: 100 }))).toBe("admin_only");
});

test("state changes need the session's CSRF token and the same origin", async () => {
  const pw = await consoleAccount(t, "csrf-a");
  const c = consoleClient(t);
  await c.signIn("csrf-a", pw);
  const create = (headers: Record<string, string>) => c.call("POST", "/console/api/keys", { kind: "premium" }, headers);
  expect(await code(await create({ "x-csrf-token": "" }))).toBe("csrf_failed");
  expect(await code(await create({ "x-csrf-token": "x".repeat(32) }))).toBe("csrf_failed");
  expect(await code(await create({ origin: "http://evil.example" }))).toBe("csrf_failed");
  expect(await code(await create({ "sec-fetch-site": "cross-site" }))).toBe("csrf_failed");
  expect((await c.json("GET", "/console/api/keys")).data).toEqual([]); // nothing was created
  // A form posted from another site cannot sign anyone in either (login CSRF).
  const cross = await t.app.handle(new Request(`${BASE}/console/api/login`, { method: "POST", headers: { origin: "http://evil.example", "content-type": "application/json" }, body: JSON.stringify({ account: "csrf-a", password: pw }) }));
  expect(cross.status).toBe(403);
  expect(cross.headers.get("set-cookie")).toBeNull();
  expect((await create({})).status).toBe(200);
});

test("the cookie is HttpOnly, SameSite=Strict, scoped to /console; the password is stored as argon2id", async () => {
  const pw = await consoleAccount(t, "cookie-a");
  const res = await consoleClient(t).signIn("cookie-a", pw);
  const cookie = res.headers.get("set-cookie")!;
  expect(cookie).toContain("HttpOnly");
  expect(cookie).toContain("SameSite=Strict");
  expect(cookie).toContain("Path=/console");
  const row = t.deps.db.query("SELECT password_hash FROM accounts WHERE name = 'cookie-a'").get() as { password_hash: string };
  expect(row.password_hash).toStartWith("$argon2id$");
  expect(row.password_hash).not.toContain(pw);
  const token = cookie.split(";")[0]!.split("=")[1]!;
  expect(JSON.stringify(t.deps.db.query("SELECT * FROM console_sessions").all())).not.toContain(token);
});

test("API keys cannot sign in or stand in for a session", async () => {
  const pw = await consoleAccount(t, "keys-a");
  const { key } = t.deps.accounts.createKey({ account: "keys-a", kind: "premium" });
  const c = consoleClient(t);
  expect(await code(await c.signIn("keys-a", key))).toBe("invalid_credentials");
  expect((await c.signIn(key, key)).status).toBe(401);
  const bearer = await t.app.handle(new Request(`${BASE}/console/api/keys`, { headers: { authorization: `Bearer ${key}` } }));
  expect(bearer.status).toBe(401);
  expect(await code(bearer)).toBe("not_signed_in");
  expect((await c.signIn("keys-a", pw)).status).toBe(200);
});

test("sessions end when idle for a day, on sign-out, and when the password changes", async () => {
  const pw = await consoleAccount(t, "idle-a");
  const c = consoleClient(t);
  await c.signIn("idle-a", pw);
  clock.advance(SESSION_IDLE_MS - 1000);
  expect((await c.call("GET", "/console/api/session")).status).toBe(200); // use keeps it alive
  clock.advance(SESSION_IDLE_MS - 1000);
  expect((await c.call("GET", "/console/api/session")).status).toBe(200);
  clock.advance(SESSION_IDLE_MS);
  expect((await c.call("GET", "/console/api/session")).status).toBe(401);

  await c.signIn("idle-a", pw);
  await t.deps.console.auth.setPassword("idle-a", "a-new-password-1");
  expect((await c.call("GET", "/console/api/session")).status).toBe(401);
  expect((await c.signIn("idle-a", pw)).status).toBe(401);
  expect((await c.signIn("idle-a", "a-new-password-1")).status).toBe(200);
});
