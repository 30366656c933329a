import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { ConfigError, validateConfig } from "../../src/lib/config";
import { SIGNIN_FAILURES_PER_ADDRESS, SIGNIN_FREE_FAILURES } from "../../src/2-services/console/throttle";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { forwardedClient, NO_TRUSTED_PROXIES, parseTrustedProxies, trustedProxyProblem } from "../../src/lib/net/trusted-proxies";
import { tempDir } from "../helpers/app";

// The client behind a reverse proxy (issue 41 L4): X-Forwarded-For is read from the peers listed in
// server.trusted_proxies only, right to left, and the console's sign-in throttle keys on the client
// it names; a proxy on the host that is not listed can neither spend the host's own budget (the
// owner at the host locked out) nor one budget shared by every client behind it.

test("the client is the right-most X-Forwarded-For address no listed proxy stands for; only from a listed peer", () => {
  const proxies = parseTrustedProxies(["10.0.0.0/8", "::1", "fd00::/8"]);
  const table: [peer: string, xff: string | null, client: string][] = [
    ["10.0.0.5", "203.0.113.7", "203.0.113.7"],
    ["10.0.0.5", "1.2.3.4, 203.0.113.7", "203.0.113.7"], // the left-most is the client's to write
    ["10.0.0.5", "203.0.113.7, 10.0.0.4", "203.0.113.7"], // a chain of listed proxies
    ["10.0.0.5", "203.0.113.7,10.9.9.9 , 10.0.0.4", "203.0.113.7"],
    ["10.0.0.5", "10.0.0.9, 10.0.0.4", "10.0.0.9"], // all listed: the left-most
    ["10.0.0.5", "1.2.3.4, unknown, 10.0.0.4", "10.0.0.4"], // no address: the last hop vouched for
    ["10.0.0.5", "[2001:db8::1]:4711", "2001:db8::1"],
    ["10.0.0.5", "203.0.113.7:80", "203.0.113.7"],
    ["10.0.0.5", null, "10.0.0.5"],
    ["10.0.0.5", "", "10.0.0.5"],
    ["::ffff:10.0.0.5", "203.0.113.7", "203.0.113.7"], // a dual-stack listener's view of 10.0.0.5
    ["::1", "2001:db8::2", "2001:db8::2"],
    ["fd00::3", "2001:db8::2, fd12::1", "2001:db8::2"],
    ["198.51.100.9", "203.0.113.7", "198.51.100.9"], // not listed: never read
    ["127.0.0.1", "203.0.113.7", "127.0.0.1"],
  ];
  for (const [peer, xff, client] of table) expect({ peer, xff, client: forwardedClient(peer, xff, proxies) }).toEqual({ peer, xff, client });
  expect(forwardedClient("10.0.0.5", "203.0.113.7", NO_TRUSTED_PROXIES)).toBe("10.0.0.5");
});

test("server.trusted_proxies takes addresses and CIDR blocks; anything else is refused at start, naming the entry", () => {
  for (const ok of ["127.0.0.1", "10.0.0.0/8", "0.0.0.0/0", "::1", "fd00::/8", "::/0", "[::1]"]) expect(trustedProxyProblem(ok)).toBeNull();
  for (const bad of ["localhost", "10.0.0.0/33", "::1/129", "10.0.0.0/8/1", "10.1", "10.0.0.0/x", ""]) expect(trustedProxyProblem(bad)).not.toBeNull();
  expect(validateConfig({ server: { trusted_proxies: ["127.0.0.1", "192.168.0.0/16"] } }).server.trusted_proxies).toEqual(["127.0.0.1", "192.168.0.0/16"]);
  expect(validateConfig({}).server.trusted_proxies).toEqual([]);
  expect(() => validateConfig({ server: { trusted_proxies: ["10.0.0.0/8", "proxy.lan"] } })).toThrow(ConfigError);
  expect(() => validateConfig({ server: { trusted_proxies: ["10.0.0.0/8", "proxy.lan"] } })).toThrow("server.trusted_proxies[1]");
});

// ---- Through a real server -------------------------------------------------------------------

/** This machine's first non-loopback IPv4 address: a peer that is not the host itself. */
const lan = Object.values(networkInterfaces())
  .flat()
  .find((i) => i && i.family === "IPv4" && !i.internal)?.address;

const dirs: string[] = [];
const servers: RunningServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function serve(host: string, trusted: string[]): Promise<{ url: string; password: string }> {
  const dir = tempDir("appliance-proxies-");
  dirs.push(dir);
  const banner: string[] = [];
  const s = await startServer(validateConfig({ server: { data_dir: dir, port: 0, host, ...(trusted.length ? { trusted_proxies: trusted } : {}) }, rentals: { discover: false } }), {
    logger: memoryLogger(),
    banner: (l) => banner.push(l),
  });
  servers.push(s);
  return { url: s.url, password: /password ([0-9A-Za-z]{20})/.exec(banner.join("\n"))![1]! };
}

let names = 0;
/** One sign-in: its status. `xff` null sends no X-Forwarded-For. */
async function signIn(url: string, account: string, password: string, xff: string | null): Promise<number> {
  const res = await fetch(`${url}/console/api/login`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(xff === null ? {} : { "x-forwarded-for": xff }) },
    body: JSON.stringify({ account, password }),
  });
  await res.body?.cancel();
  return res.status;
}
/** A failed sign-in under a name never used before (no account's back-off comes into it). */
const stranger = (url: string, xff: string | null) => signIn(url, `nobody-${++names}`, "wrong-password-0123", xff);

describe.skipIf(!lan)("behind a proxy listed in server.trusted_proxies", () => {
  let url: string;
  beforeAll(async () => {
    ({ url } = await serve(lan!, [lan!]));
  });

  test("the sign-in throttle keys on the forwarded client: one client's spent budget leaves another's whole", async () => {
    for (let i = 0; i < SIGNIN_FAILURES_PER_ADDRESS; i++) expect(await stranger(url, "203.0.113.5")).toBe(401);
    expect(await stranger(url, "203.0.113.5")).toBe(429);
    expect(await stranger(url, "203.0.113.6")).toBe(401);
    // Through a second listed hop (the proxy's own address appended by another proxy).
    expect(await stranger(url, `203.0.113.5, ${lan}`)).toBe(429);
    expect(await stranger(url, `203.0.113.7, ${lan}`)).toBe(401);
  }, 60_000);

  test("a spoofed left-most entry is ignored: the client cannot pick its own bucket", async () => {
    for (let i = 0; i < 5; i++) expect(await stranger(url, `198.51.100.${i + 1}, 203.0.113.5`)).toBe(429);
    expect(await stranger(url, "127.0.0.1, 203.0.113.5")).toBe(429); // nor claim to be the host
  });
});

describe.skipIf(!lan)("from a peer not listed", () => {
  test("X-Forwarded-For is ignored: rotating it buys no new budget", async () => {
    const { url } = await serve(lan!, ["10.255.255.0/24"]);
    for (let i = 0; i < SIGNIN_FAILURES_PER_ADDRESS; i++) expect(await stranger(url, `203.0.113.${i + 1}`)).toBe(401);
    expect(await stranger(url, "203.0.113.200")).toBe(429);
    expect(await stranger(url, null)).toBe(429);
  }, 60_000);
});

describe("a proxy on the host that is not listed", () => {
  let url: string;
  let password: string;
  beforeAll(async () => {
    ({ url, password } = await serve("127.0.0.1", []));
  });

  test("strangers behind it cannot lock the owner at the host out: their failures meet the account's back-off, not the host's budget", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < SIGNIN_FAILURES_PER_ADDRESS + 2; i++) statuses.push(await signIn(url, "admin", "wrong-password-0123", `203.0.113.${i + 1}`));
    // The account's back-off after the free failures: not the host's budget of 20.
    expect(statuses.slice(0, SIGNIN_FREE_FAILURES)).toEqual(Array(SIGNIN_FREE_FAILURES).fill(401));
    expect(statuses.slice(SIGNIN_FREE_FAILURES)).toContain(429);
    // The owner on the host itself (no proxy in between) signs in at once.
    expect(await signIn(url, "admin", password, null)).toBe(200);
  }, 60_000);

  test("nor can one stranger spend a budget that all of them share", async () => {
    for (let i = 0; i < SIGNIN_FAILURES_PER_ADDRESS + 3; i++) expect(await stranger(url, "203.0.113.9")).toBe(401);
  }, 60_000);
});
