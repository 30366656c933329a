import { afterAll, beforeAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { validateConfig } from "../../../src/lib/config";
import { memoryLogger } from "../../../src/lib/log";
import { startServer, type RunningServer } from "../../../src/main";
import { endRentals, tempDir } from "../../helpers/app";
import { rentalConfig, until } from "./setup";

// The rental proxy forwards no credential of the appliance (issue 41 L1): the notebook is the
// renter's code, and whatever reaches it the renter reads. A stand-in notebook server that echoes
// the headers it received (./echo-notebook.ts), launched by the real process launcher, reached
// through a real appliance listener over HTTP and WebSocket.

const ECHO = join(import.meta.dir, "echo-notebook.ts");
const dir = tempDir("appliance-proxy-creds-");
let server: RunningServer;
let apiKey: string;
let base: string;
let token: string;
let access: string;

beforeAll(async () => {
  const config = validateConfig({ ...rentalConfig({ access: "proxy", command: [process.execPath, ECHO] }), server: { data_dir: dir, port: 0 } });
  server = await startServer(config, { logger: memoryLogger(), banner: () => {} });
  apiKey = (await server.deps.accounts.createKey({ account: "admin", kind: "premium", name: "rentals", scopes: ["inference", "rental"] })).key;
  const api = (method: string, path: string, body?: unknown) =>
    fetch(server.url + path, { method, headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const [gpu] = (await api("GET", "/api/v1/gpus")).data;
  const { rental_id } = await api("POST", "/api/v1/rentals", { node_id: gpu.node_id, type: "jupyter" });
  const running = await until(() => api("GET", `/api/v1/rentals/${rental_id}`), (r) => r.status !== "pending");
  expect(running.status).toBe("running");
  token = running.connection.token;
  base = `${server.url}/rentals/${rental_id}/`;
  // The access cookie the proxy sets once a ?token= was accepted.
  const first = await fetch(`${base}echo?token=${token}`);
  expect(first.status).toBe(200);
  access = first.headers.getSetCookie().find((c) => c.startsWith("appliance_rental="))!.split(";")[0]!;
}, 60_000);

afterAll(async () => {
  if (server) await endRentals(server.deps);
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** What a browser signed in to the console, or a client holding an API key, may send along. */
const applianceCredentials = () => ({
  authorization: `Bearer ${apiKey}`,
  "x-api-key": apiKey,
  "x-csrf-token": "console-csrf-token",
  cookie: `appliance_session=console-session; _xsrf=nb-xsrf; appliance_device=device-token; ${access}; Appliance_Session=x; nb-own=1`,
});

const echoed = async (res: Response) => {
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, string>;
};

test("HTTP: an API key (Bearer or x-api-key), the console's CSRF header and the appliance's cookies never reach the notebook; its own cookies do", async () => {
  const seen = await echoed(await fetch(`${base}echo`, { headers: applianceCredentials() }));
  expect(seen.authorization).toBeUndefined();
  expect(seen["x-api-key"]).toBeUndefined();
  expect(seen["x-csrf-token"]).toBeUndefined();
  expect(seen.cookie).toBe("_xsrf=nb-xsrf; nb-own=1");
  expect(JSON.stringify(seen)).not.toContain(apiKey);
  // Authorized by ?token= instead of the cookie: the same.
  const byQuery = await echoed(await fetch(`${base}echo?token=${token}`, { headers: applianceCredentials() }));
  expect(byQuery.authorization).toBeUndefined();
  expect(byQuery.cookie).toBe("_xsrf=nb-xsrf; nb-own=1");
  // Only appliance cookies: no Cookie header at all.
  const bare = await echoed(await fetch(`${base}echo?token=${token}`, { headers: { cookie: `appliance_session=s; ${access}` } }));
  expect(bare.cookie).toBeUndefined();
});

test("HTTP: the notebook's own token in Authorization (Jupyter's `token …` and `Bearer …`) passes, as Jupyter checks it again", async () => {
  for (const scheme of ["token", "Bearer"]) {
    const seen = await echoed(await fetch(`${base}echo`, { headers: { authorization: `${scheme} ${token}`, "x-api-key": apiKey } }));
    expect(seen.authorization).toBe(`${scheme} ${token}`);
    expect(seen["x-api-key"]).toBeUndefined();
  }
});

/** The headers the notebook saw on a WebSocket upgrade made with `headers`. */
async function upgradeSeen(headers: Record<string, string>, query = ""): Promise<Record<string, string>> {
  const ws = new WebSocket(`${base.replace(/^http/, "ws")}api/kernels/k1/channels${query}`, { headers } as unknown as string[]);
  try {
    return await new Promise((resolve, reject) => {
      ws.onmessage = (e) => resolve(JSON.parse(String(e.data)));
      ws.onerror = () => reject(new Error("WebSocket failed"));
      ws.onclose = (e) => reject(new Error(`WebSocket closed ${e.code}`));
    });
  } finally {
    ws.close();
  }
}

test("WebSocket: the upgrade forwards no appliance credential either; the notebook's token and cookies pass", async () => {
  const seen = await upgradeSeen(applianceCredentials());
  expect(seen.authorization).toBeUndefined();
  expect(seen["x-api-key"]).toBeUndefined();
  expect(seen["x-csrf-token"]).toBeUndefined();
  expect(seen.cookie).toBe("_xsrf=nb-xsrf; nb-own=1");
  const byQuery = await upgradeSeen(applianceCredentials(), `?token=${token}`);
  expect(byQuery.authorization).toBeUndefined();
  const own = await upgradeSeen({ authorization: `token ${token}`, cookie: "appliance_session=s; nb-own=1" });
  expect(own.authorization).toBe(`token ${token}`);
  expect(own.cookie).toBe("nb-own=1");
});

test("responses: a notebook sets no cookie of the appliance's, none outside its path, none for another domain", async () => {
  const res = await fetch(`${base}set-cookies?token=${token}`);
  expect(res.status).toBe(200);
  const set = res.headers.getSetCookie();
  const names = set.map((c) => c.split("=")[0]!);
  // The proxy's own access cookie (the ?token= was accepted), never the planted one.
  expect(set.filter((c) => /^appliance_rental=/i.test(c))).toEqual([expect.stringMatching(new RegExp(`^${access}; Path=${new URL(base).pathname}; HttpOnly`))]);
  expect(names.filter((n) => /^appliance_/i.test(n))).toEqual(["appliance_rental"]);
  expect(names).not.toContain("shadow");
  const path = new URL(base).pathname;
  const own = set.filter((c) => c.startsWith("nb-"));
  expect(own.map((c) => c.split("=")[0])).toEqual(["nb-own", "nb-nopath", "nb-domain"]);
  for (const c of own) {
    expect(c.toLowerCase()).toContain(`; path=${path.toLowerCase()}`);
    expect(c).not.toMatch(/;\s*domain=/i);
  }
});
