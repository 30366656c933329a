import { afterAll, beforeAll, expect, test } from "bun:test";
import { hostname } from "node:os";
import { ManualClock } from "../../../src/lib/clock";
import { SESSION_IDLE_MS } from "../../../src/2-services/console/auth";
import { BASE, testApp, type TestApp } from "../../helpers/app";
import { consoleAccount, consoleClient } from "./client";

// Sessions, not keys; one account's session cannot touch another's resources; CSRF and
// cross-site requests and other origins refused; only this machine's host names answered;
// passwords hashed. Sign-in throttling: console.signin.test.ts.

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
  const b = await t.deps.accounts.createKey({ account: "sec-b", kind: "premium" });
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
  expect(await t.deps.accounts.getKey(b.info.id)).toMatchObject({ revoked_at: null, scopes: ["inference"] });
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

test("an origin is scheme, host and port: https:// on an http console, another port, same-site or null are refused", async () => {
  const pw = await consoleAccount(t, "origin-a");
  const c = consoleClient(t);
  await c.signIn("origin-a", pw);
  const create = (headers: Record<string, string>) => c.call("POST", "/console/api/keys", { kind: "premium" }, headers);
  const refused: Record<string, string>[] = [
    { origin: "https://localhost" },
    { origin: "http://localhost:8080" },
    { origin: "null" },
    { origin: "localhost" },
    { "sec-fetch-site": "same-site" },
  ];
  for (const headers of refused) expect({ headers, code: await code(await create(headers)) }).toEqual({ headers, code: "csrf_failed" });
  const login = await t.app.handle(new Request(`${BASE}/console/api/login`, { method: "POST", headers: { origin: "https://localhost", "content-type": "application/json" }, body: JSON.stringify({ account: "origin-a", password: pw }) }));
  expect(login.status).toBe(403);
  expect((await c.json("GET", "/console/api/keys")).data).toEqual([]);
  // The same origin passes, the default port written out or not; behind a TLS proxy the scheme is its.
  expect((await create({ origin: "http://localhost:80" })).status).toBe(200);
  expect((await create({ origin: "https://localhost", "x-forwarded-proto": "https" })).status).toBe(200);
  expect((await create({ origin: "http://localhost", "sec-fetch-site": "same-origin" })).status).toBe(200);
});

test("a DNS-rebinding page's host name is refused on every console route; this machine's names are answered", async () => {
  const pw = await consoleAccount(t, "host-a");
  const at = (host: string, path: string, init: RequestInit = {}) => {
    const headers = new Headers(init.headers);
    headers.set("host", host);
    return t.app.handle(new Request(`http://${host}${path}`, { ...init, headers }));
  };
  const login = (host: string) =>
    at(host, "/console/api/login", { method: "POST", headers: { origin: `http://${host}`, "content-type": "application/json" }, body: JSON.stringify({ account: "host-a", password: pw }) });
  const rebound = await login("evil.example:8484");
  expect(rebound.status).toBe(403);
  expect(await code(rebound)).toBe("csrf_failed");
  expect(rebound.headers.get("set-cookie")).toBeNull();
  for (const path of ["/", "/console", "/console/app.js", "/console/api/session"]) expect({ path, status: (await at("evil.example", path)).status }).toEqual({ path, status: 403 });
  for (const host of ["localhost:8484", "127.0.0.1:8484", "[::1]:8484", "appliance.local", `${hostname()}:8484`]) expect({ host, status: (await login(host)).status }).toEqual({ host, status: 200 });
  // More names come from the config.
  const named = testApp({ config: { server: { allowed_hosts: ["console.example.com"] } } });
  try {
    await consoleAccount(named, "host-b", { password: pw });
    const res = (host: string) =>
      named.app.handle(new Request(`http://${host}/console/api/login`, { method: "POST", headers: { host, origin: `http://${host}`, "content-type": "application/json" }, body: JSON.stringify({ account: "host-b", password: pw }) }));
    expect((await res("console.example.com")).status).toBe(200);
    expect((await res("evil.example")).status).toBe(403);
  } finally {
    await named.close();
  }
});

test("the cookie is HttpOnly, SameSite=Strict, scoped to /console; the password is stored as argon2id", async () => {
  const pw = await consoleAccount(t, "cookie-a");
  const res = await consoleClient(t).signIn("cookie-a", pw);
  const cookie = res.headers.get("set-cookie")!;
  expect(cookie).toContain("HttpOnly");
  expect(cookie).toContain("SameSite=Strict");
  expect(cookie).toContain("Path=/console");
  const row = t.deps.db!.query("SELECT password_hash FROM accounts WHERE name = 'cookie-a'").get() as { password_hash: string };
  expect(row.password_hash).toStartWith("$argon2id$");
  expect(row.password_hash).not.toContain(pw);
  const token = cookie.split(";")[0]!.split("=")[1]!;
  expect(JSON.stringify(t.deps.db!.query("SELECT * FROM console_sessions").all())).not.toContain(token);
});

test("API keys cannot sign in or stand in for a session", async () => {
  const pw = await consoleAccount(t, "keys-a");
  const { key } = await t.deps.accounts.createKey({ account: "keys-a", kind: "premium" });
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
