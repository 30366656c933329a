import { afterAll, beforeAll, expect, test } from "bun:test";
import { SQL } from "bun";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { costOfMinutes } from "../../src/2-services/billing/minutes";
import { nodeIdFor } from "../../src/2-services/rentals/inventory";
import { FAKE_JUPYTER, processesOf, rentalNode } from "../api/rentals/setup";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";
import { serveNode, type ServedNode } from "../helpers/nodes";
import { freshDatabase, nodeEnv } from "../helpers/postgres";

// Issue 45: GPU rentals on three real appliance nodes on one PostgreSQL, each offering one GPU of its
// own (declared in its config, launched by the real process launcher running the stand-in JupyterLab,
// test/fixtures/rentals/fake-jupyter.ts, reached through the appliance's port):
// - every node lists the three GPUs, each with the node that launches it;
// - a rental of node 3's GPU created at node 1 is launched, billed and served by node 3 alone: its
//   notebook works through node 1 over HTTP and a WebSocket; node 3 killed (SIGKILL) — the socket
//   through node 1 closes, nobody bills the rental on (not even once its lease has lapsed), and node 1
//   answers its stop, logs and notebook with 503 rental_node_unreachable; node 3 started again ends it
//   `failed`, billed the minutes charged before the kill, each once, and stops its notebook;
// - a stop and the logs asked at another node are served by the rental's node.

const PRICE = 0.6; // $ per hour
const PRICE_MICROS = 600_000;
const CREDIT = 50;
const dirs: string[] = [];
let url = "";
let sql: SQL;
let key = "";
const nodes: ServedNode[] = [];
/** The GPU node id each cluster node declares (its config's one [[rental_nodes]]). */
const gpus: string[] = [];

function configFor(dir: string, i: number): string {
  const path = join(dir, "config.toml");
  const gpu = rentalNode(i, PRICE);
  const lines = [
    "[engines]",
    'device = "cpu"',
    "threads = 1",
    "[rentals]",
    "discover = false",
    'public_host = "127.0.0.1"',
    'access = "proxy"',
    "ready_timeout_s = 20",
    "[rentals.process]",
    `command = ${JSON.stringify([process.execPath, FAKE_JUPYTER])}`,
    'bind = "127.0.0.1"',
    "[[rental_nodes]]",
    ...Object.entries(gpu).map(([k, v]) => `${k} = ${JSON.stringify(v)}`),
  ];
  writeFileSync(path, lines.join("\n") + "\n");
  return path;
}

const env = (dir: string, i: number) => ({ APPLIANCE_CONFIG: configFor(dir, i), ...nodeEnv(url) });

/** Starts node i (again, on its own data dir: the same node id); its output is drained, the last of it kept. */
async function startNode(i: number): Promise<void> {
  const dir = nodes[i]?.dir ?? tempDir(`appliance-rent-${i}-`);
  if (!nodes[i]) dirs.push(dir);
  nodes[i] = await serveNode(dir, env(dir, i));
}

afterAll(async () => {
  for (const n of nodes) n?.child.kill("SIGKILL");
  await Promise.all(nodes.map((n) => n?.child.exited));
  // The notebooks the nodes launched (a killed node leaves its own behind).
  const rows: { id: string }[] = sql ? await sql`SELECT id FROM rentals`.catch(() => []) : [];
  for (const r of rows) for (const pid of processesOf(r.id)) process.kill(pid, "SIGKILL");
  await sql?.close();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

const admin = (args: string[]) => {
  const dir = tempDir("appliance-rent-cli-");
  dirs.push(dir);
  const r = cli(dir, args, env(dir, 0));
  if (r.code !== 0) throw new Error(`appliance ${args.join(" ")} failed: ${r.stderr}`);
  return r;
};
const newKey = (account: string) => admin(["keys", "create", "--account", account, "--premium", "--scope", "rental", "--max-active-rentals", "3", "--json"]).json<{ key: string }>().key;

/** An API call at node i, with `k` (default: the test's key). */
function api(i: number, method: string, path: string, o: { body?: unknown; key?: string; headers?: Record<string, string> } = {}): Promise<Response> {
  return fetch(nodes[i]!.url + path, {
    method,
    headers: { authorization: `Bearer ${o.key ?? key}`, "content-type": "application/json", ...o.headers },
    body: o.body === undefined ? undefined : JSON.stringify(o.body),
  });
}
const json = async (r: Response | Promise<Response>): Promise<any> => (await r).json();

async function until<T>(what: string, get: () => Promise<T>, ok: (v: T) => boolean, timeoutMs: number): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await get();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`${what}: not within ${timeoutMs} ms (last: ${JSON.stringify(v)})`);
    await Bun.sleep(100);
  }
}

const rowOf = async (id: string) => {
  const [r] = await sql`SELECT status, billed_minutes, cost_micros, lease_owner, lease_until, cluster_node, running_at FROM rentals WHERE id = ${id}`;
  return { ...r, billed_minutes: Number(r.billed_minutes), cost_micros: Number(r.cost_micros), lease_until: Number(r.lease_until), running_at: Number(r.running_at) };
};
const usageOf = async (id: string) =>
  (await sql`SELECT request_id, cost_micros FROM usage WHERE request_id LIKE ${`${id}:m%`} ORDER BY request_id`).map((u: { request_id: string; cost_micros: string }) => ({
    request_id: u.request_id,
    cost_micros: Number(u.cost_micros),
  }));
/** Waits until node i offers GPU node `gpu` (it reads the others' at its beats, every 3 s). */
const offeredAt = (i: number, gpu: string) => until(`GPU ${gpu} offered at node ${i + 1}`, () => json(api(i, "GET", "/api/v1/gpus")), (l) => l.data.some((g: { node_id: string }) => g.node_id === gpu), 10_000);
const dbNow = async () => Number((await sql`SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now`)[0].now);

function openSocket(address: string): Promise<WebSocket> {
  const ws = new WebSocket(address);
  return new Promise((resolve, reject) => {
    ws.onopen = () => resolve(ws);
    ws.onerror = () => reject(new Error("websocket refused"));
  });
}
const nextMessage = (ws: WebSocket) => new Promise<unknown>((resolve) => (ws.onmessage = (e) => resolve(e.data)));

beforeAll(async () => {
  url = await freshDatabase("cluster_rentals");
  sql = new SQL({ url, max: 2 });
  admin(["store", "migrate"]);
  admin(["accounts", "create", "team", "--credit", String(CREDIT)]);
  key = newKey("team");
  await Promise.all([0, 1, 2].map(startNode));
  for (let i = 0; i < 3; i++) gpus[i] = nodeIdFor(rentalNode(i).gpu_uuid);
}, 120_000);

test("every node lists the GPUs of every live node, each with the node that launches its rentals", async () => {
  const want = [0, 1, 2].map((i) => ({ node_id: gpus[i], cluster_node: nodes[i]!.id, gpu_model: "NVIDIA GeForce RTX 4090", price_per_hour: PRICE, country_code: "DE", compute_cap: 8.9, vram_mb: 24564 }));
  want.sort((a, b) => (a.node_id! < b.node_id! ? -1 : 1));
  for (let i = 0; i < 3; i++) {
    // Each node reads the others' GPUs at its beats (every 3 s).
    const list = await until(`node ${i + 1}'s GPU list`, () => json(api(i, "GET", "/api/v1/gpus")), (l) => l.data.length === 3, 10_000);
    const got = [...list.data].sort((a: any, b: any) => (a.node_id < b.node_id ? -1 : 1));
    expect(got).toMatchObject(want);
  }
}, 30_000);

test("a rental of node 3's GPU created at node 1 is run by node 3 alone; node 3 killed — billing stops; restarted — the rental fails and its notebook stops", async () => {
  const [n1, n3] = [nodes[0]!, nodes[2]!];
  await Promise.all([offeredAt(0, gpus[2]!), offeredAt(1, gpus[2]!)]);
  const created = await api(0, "POST", "/api/v1/rentals", { body: { node_id: gpus[2], type: "jupyter" }, headers: { "idempotency-key": "rent-once" } });
  expect(created.status).toBe(200);
  expect(created.headers.get("x-appliance-node")).toBe(n3.id);
  const rental = await created.json();
  expect(rental).toMatchObject({ status: "pending", node_id: gpus[2] });
  // The same Idempotency-Key at node 2 finds the same rental (on node 3, its GPU no longer offered).
  expect(await json(api(1, "POST", "/api/v1/rentals", { body: { node_id: gpus[2], type: "jupyter" }, headers: { "idempotency-key": "rent-once" } }))).toMatchObject({ rental_id: rental.rental_id });
  const id: string = rental.rental_id;
  expect((await rowOf(id)).cluster_node).toBe(n3.id);

  // Read anywhere (the store is shared); running once node 3's launch answers (its first minute charged just after).
  const running = await until("the rental to run", () => json(api(1, "GET", `/api/v1/rentals/${id}`)), (r) => r.status !== "pending" && (r.status !== "running" || r.billed_minutes > 0), 20_000);
  expect(running).toMatchObject({ status: "running", billed_minutes: 1 });
  const token: string = running.connection.token;

  // The notebook through node 1: served by node 3 (its working dir is node 3's), the token checked.
  const lab = await fetch(`${n1.url}/rentals/${id}/lab?token=${token}`);
  expect(lab.status).toBe(200);
  expect(lab.headers.get("x-appliance-node")).toBe(n3.id);
  expect((await lab.json()).cwd).toStartWith(join(n3.dir, "rentals", id));
  // As a browser goes on: with the cookies set (the proxy's, checked on both nodes, and the notebook's own login).
  const cookies = lab.headers.getSetCookie().map((c) => c.split(";")[0]!);
  expect(cookies.some((c) => c.startsWith("appliance_rental="))).toBe(true);
  expect((await fetch(`${n1.url}/rentals/${id}/lab`, { headers: { cookie: cookies.join("; ") } })).status).toBe(200);
  const refused = await fetch(`${n1.url}/rentals/${id}/lab?token=${"x".repeat(40)}`);
  expect(refused.status).toBe(401);
  expect((await refused.json()).error.code).toBe("invalid_credentials");
  // A WebSocket through node 1, piped to node 3's notebook.
  const ws = await openSocket(`${n1.url.replace("http", "ws")}/rentals/${id}/api/kernels/k1/channels?token=${token}`);
  const echoed = nextMessage(ws);
  ws.send("hello");
  expect(await echoed).toBe("echo:hello");
  const socketClosed = new Promise<number>((resolve) => (ws.onclose = (e) => resolve(e.code)));

  // Node 3 bills as minutes start (running_at moved back: as if the rental had run a minute longer).
  await sql`UPDATE rentals SET running_at = running_at - 61000 WHERE id = ${id}`;
  await until("node 3 to bill minute 2", () => rowOf(id), (r) => r.billed_minutes === 2, 10_000);
  // Minute 3 would start 10 s from now; node 3 dies first, with its notebook still running.
  await sql`UPDATE rentals SET running_at = ${Date.now() - 110_000} WHERE id = ${id}`;
  n3.child.kill("SIGKILL");
  await n3.child.exited;
  expect(processesOf(id).length).toBeGreaterThan(0);
  expect(await Promise.race([socketClosed, Bun.sleep(5000).then(() => "still open")])).not.toBe("still open");

  // Nobody bills it on: not before, nor once its lease lapsed (another node would take it then).
  const leaseUntil = (await rowOf(id)).lease_until;
  await until("node 3's lease to lapse", dbNow, (now) => now > leaseUntil + 3000, 25_000);
  expect(await rowOf(id)).toMatchObject({ status: "running", billed_minutes: 2, lease_owner: n3.id });
  // What users see meanwhile: still running, its stop, logs and notebook waiting for node 3.
  expect(await json(api(0, "GET", `/api/v1/rentals/${id}`))).toMatchObject({ status: "running", billed_minutes: 2 });
  for (const r of [await api(0, "DELETE", `/api/v1/rentals/${id}`), await api(1, "GET", `/api/v1/rentals/${id}/logs`), await fetch(`${n1.url}/rentals/${id}/lab?token=${token}`)]) {
    expect(r.status).toBe(503);
    expect((await r.json()).error).toMatchObject({ code: "rental_node_unreachable", type: "server_error" });
  }
  await expect(openSocket(`${n1.url.replace("http", "ws")}/rentals/${id}/api/kernels/k2/channels?token=${token}`)).rejects.toThrow();

  // Node 3 back: it ends what it held when it died, billed no further, and stops the notebook.
  await startNode(2);
  const ended = await until("the rental to end", () => json(api(0, "GET", `/api/v1/rentals/${id}`)), (r) => r.status === "failed", 15_000);
  expect(ended).toMatchObject({ status: "failed", stop_reason: "error", billed_minutes: 2, cost: 0.02, connection: null });
  expect(ended.failure).toContain(`node ${n3.id}`);
  expect(await usageOf(id)).toEqual([
    { request_id: `${id}:m1`, cost_micros: costOfMinutes(PRICE_MICROS, 1) },
    { request_id: `${id}:m2`, cost_micros: costOfMinutes(PRICE_MICROS, 2) - costOfMinutes(PRICE_MICROS, 1) },
  ]);
  expect(processesOf(id)).toEqual([]);
  // Its GPU is offered again, everywhere.
  await offeredAt(0, gpus[2]!);
}, 60_000);

test("a stop and the logs asked at another node are the rental's node's: its log, stopped at once with its notebook; another key's rental is a 404 there", async () => {
  const other = newKey("team");
  await Promise.all([offeredAt(0, gpus[1]!), offeredAt(2, gpus[1]!)]);
  const made = await json(api(0, "POST", "/api/v1/rentals", { body: { node_id: gpus[1], type: "jupyter" } }));
  const id: string = made.rental_id;
  await until("the rental to run", () => json(api(0, "GET", `/api/v1/rentals/${id}`)), (r) => r.status !== "pending", 20_000);
  expect((await rowOf(id)).cluster_node).toBe(nodes[1]!.id);

  const log = await api(2, "GET", `/api/v1/rentals/${id}/logs`);
  expect(log.status).toBe(200);
  expect(await log.text()).toContain("fake-jupyter listening");
  expect((await api(2, "DELETE", `/api/v1/rentals/${id}`, { key: other })).status).toBe(404);
  expect(processesOf(id).length).toBeGreaterThan(0);

  const stopped = await api(2, "DELETE", `/api/v1/rentals/${id}`);
  expect(stopped.headers.get("x-appliance-node")).toBe(nodes[1]!.id);
  expect(await stopped.json()).toMatchObject({ status: "stopped", stop_reason: "user" });
  expect(processesOf(id)).toEqual([]);
  // Billed by node 2 alone: its first minute, once.
  expect((await usageOf(id)).map((u: { request_id: string }) => u.request_id)).toEqual([`${id}:m1`]);
}, 60_000);
