import { afterAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createApp } from "../../../src/app";
import { ManualClock } from "../../../src/lib/clock";
import { validateConfig } from "../../../src/lib/config";
import { memoryLogger } from "../../../src/lib/log";
import { createServices } from "../../../src/services";
import { openStore } from "../../../src/4-store/db";
import { rentalsRepo } from "../../../src/4-store/rentals";
import { BASE, tempDir } from "../../helpers/app";
import { cli, serveCli } from "../../helpers/cli";
import { FAKE_JUPYTER, processesOf, rentalConfig, rentalNode, until } from "./setup";

// Rentals outlive the appliance's process: a restarted server finds what runs, keeps billing it,
// stops what is due, and fails what is gone.

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

/** One "server" on `dir`: the real services and app over the SQLite file, time from `clock`. */
async function boot(dir: string, clock: ManualClock) {
  const config = validateConfig({ ...rentalConfig({ nodes: 2 }), server: { data_dir: dir } });
  const db = openStore(dir, { synchronous: "normal" });
  const logger = memoryLogger();
  const deps = createServices(config, db, { clock, logger });
  const app = createApp(deps);
  await deps.rentals.start();
  const request = (method: string, path: string, key: string, body?: unknown) =>
    app.handle(new Request(BASE + path, { method, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) }));
  return {
    deps,
    logs: logger.lines,
    get: (key: string, id: string) => request("GET", `/api/v1/rentals/${id}`, key).then((r) => r.json() as Promise<any>),
    request,
    /** What a crash leaves: no stop of any rental; the ticks end with the process. */
    async down() {
      await deps.rentals.stop();
      db.close();
    },
  };
}

test("restarts on the same store: a running rental keeps billing, one due stops at expires_at, one whose process died fails unbilled", async () => {
  const dir = tempDir();
  dirs.push(dir);
  const clock = new ManualClock(Date.UTC(2026, 10, 1, 9, 0, 0));
  let s = await boot(dir, clock);
  await s.deps.accounts.createAccount("lab", { creditMicros: 5_000_000 });
  const key = (await s.deps.accounts.createKey({ account: "lab", kind: "premium", scopes: ["inference", "rental"], maxActiveRentals: 2 })).key;
  const nodes = (await s.deps.rentals.gpus()).map((n) => n.node_id);
  const a = await (await s.request("POST", "/api/v1/rentals", key, { node_id: nodes[0], type: "jupyter", hours: 0.1 })).json(); // 6 minutes
  const b = await (await s.request("POST", "/api/v1/rentals", key, { node_id: nodes[1], type: "jupyter" })).json();
  for (const id of [a.rental_id, b.rental_id]) await until(async () => (await s.deps.rentals.tick(), s.get(key, id)), (r) => r.status === "running");
  const aRunning = await s.get(key, a.rental_id);
  expect(aRunning).toMatchObject({ status: "running", billed_minutes: 1 });
  await s.down();

  // Down for 2.5 minutes; b's notebook server dies meanwhile.
  clock.advance(150_000);
  for (const pid of processesOf(b.rental_id)) process.kill(-pid, "SIGKILL");
  await until(async () => processesOf(b.rental_id), (p) => p.length === 0);
  s = await boot(dir, clock);
  await s.deps.rentals.tick(); // the start's first tick (or one more): it bills what started while down
  const aAfter = await s.get(key, a.rental_id);
  expect(aAfter).toMatchObject({ status: "running", billed_minutes: 3, cost: 0.03 }); // minutes 2 and 3 started while down
  expect(aAfter.connection).toEqual(aRunning.connection);
  expect((await fetch(aAfter.connection.url)).status).toBe(200); // found, still serving, same token
  expect(processesOf(a.rental_id)).toHaveLength(1); // and not started twice
  const bAfter = await s.get(key, b.rental_id);
  expect(bAfter).toMatchObject({ status: "failed", stop_reason: "error", billed_minutes: 1, cost: 0.01 });
  expect(bAfter.failure).toContain("gone when the appliance restarted");
  await s.down();

  // Down past a's expires_at: the next start stops it, billed exactly to its 6 minutes.
  clock.advance(10 * 60_000);
  s = await boot(dir, clock);
  const aDone = await until(() => s.get(key, a.rental_id), (r) => r.status === "stopped");
  expect(aDone).toMatchObject({ status: "stopped", stop_reason: "auto_stop", billed_minutes: 6, cost: 0.06 });
  expect(aDone.stopped_at).toBe(aDone.expires_at);
  expect(processesOf(a.rental_id)).toEqual([]);
  expect((await s.deps.accounts.getAccount("lab")).balance_micros).toBe(5_000_000 - 60_000 - 10_000);

  // A launch the server never got to (pending, nothing started) fails at the next start.
  const p = (await s.deps.accounts.authenticate(key))!;
  rentalsRepo(s.deps.db!).insert({ id: "rent_lost", key_id: p.keyId, account_id: p.accountId, node_id: nodes[0]!, type: "jupyter", price_per_hour_micros: 600_000, hours: null, token: "x".repeat(40), launcher: "process", created_at: clock.now() });
  await s.down();
  s = await boot(dir, clock);
  expect(await s.get(key, "rent_lost")).toMatchObject({ status: "failed", billed_minutes: 0 });
  await s.down();
}, 60_000);

for (const access of ["direct", "proxy"] as const)
test(`\`appliance serve\` killed with SIGKILL while a rental runs (${access}): the restarted server finds the process, serves and stops it`, async () => {
  const dir = tempDir();
  dirs.push(dir);
  const config = join(dir, "config.toml");
  const node = rentalNode(0);
  writeFileSync(
    config,
    [
      `[rentals]`,
      `discover = false`,
      `public_host = "127.0.0.1"`,
      `access = "${access}"`,
      `[rentals.process]`,
      `command = ${JSON.stringify([process.execPath, FAKE_JUPYTER])}`,
      `bind = "127.0.0.1"`,
      `[[rental_nodes]]`,
      ...Object.entries(node).map(([k, v]) => `${k} = ${JSON.stringify(v)}`),
    ].join("\n"),
  );
  const serve = () => serveCli(dir, ["--config", config, "--port", "0"]);

  let s = await serve();
  const made = cli(dir, ["keys", "create", "--account", "admin", "--premium", "--scope", "rental", "--json"]);
  expect(made.code).toBe(0);
  const key = made.json().key as string;
  const api = (url: string, method: string, path: string, body?: unknown) =>
    fetch(url + path, { method, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
  const [gpu] = (await api(s.url, "GET", "/api/v1/gpus")).data;
  const { rental_id } = await api(s.url, "POST", "/api/v1/rentals", { node_id: gpu.node_id, type: "jupyter" });
  const running = await until(() => api(s.url, "GET", `/api/v1/rentals/${rental_id}`), (r) => r.status !== "pending");
  expect(running.status).toBe("running");

  s.child.kill("SIGKILL");
  await s.child.exited;
  // The notebook at its own page (a proxied one's connection.url is its base, which redirects there).
  const lab = (c: { url: string }) => fetch(c.url.replace("/?token=", "/lab?token="));
  // The rental outlived the server (reached directly; through the appliance once it is back).
  if (access === "direct") expect((await lab(running.connection)).status).toBe(200);
  const [pid] = processesOf(rental_id);
  expect(pid).toBeGreaterThan(0);

  s = await serve();
  try {
    const found = await api(s.url, "GET", `/api/v1/rentals/${rental_id}`);
    if (access === "direct") expect(found).toMatchObject({ status: "running", connection: running.connection });
    else expect(found).toMatchObject({ status: "running", connection: { url: `${s.url}/rentals/${rental_id}/?token=${running.connection.token}`, token: running.connection.token } });
    expect((await lab(found.connection)).status).toBe(200);
    expect(processesOf(rental_id)).toEqual([pid!]); // the same process, not a new one
    expect((await api(s.url, "GET", "/api/v1/gpus")).data).toEqual([]); // still taken
    const stopped = await api(s.url, "DELETE", `/api/v1/rentals/${rental_id}`);
    expect(stopped).toMatchObject({ status: "stopped", stop_reason: "user" });
    expect(processesOf(rental_id)).toEqual([]);
  } finally {
    s.child.kill("SIGTERM");
    await s.child.exited;
  }
}, 60_000);
