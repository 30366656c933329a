import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import type { Principal } from "../../src/2-services/accounts/types";
import { createLimits } from "../../src/2-services/billing/limits";
import { createMeter } from "../../src/2-services/billing/meter";
import type { RentalCluster } from "../../src/2-services/rentals/cluster";
import type { Launcher } from "../../src/2-services/rentals/launchers/types";
import { createRentalsService } from "../../src/2-services/rentals/service";
import { openStore } from "../../src/4-store/db";
import { connectPostgres, migratePostgres, type PgPools } from "../../src/4-store/pg/db";
import { postgresHolds } from "../../src/4-store/pg/holds";
import { postgresLedger } from "../../src/4-store/pg/ledger";
import { postgresRentalStore } from "../../src/4-store/pg/rentals";
import { ManualClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Issue 45: the rentals service as a node of a cluster on PostgreSQL, in process (two nodes' services
// on their own connections, a stand-in launcher each, one clock): a rental is its launching node's
// alone — another node's tick neither bills nor stops it; a stop asked at another node (the console's
// Stop; the API forwards it instead) leaves it `stopping`, billed no further there, and its node stops
// it; with its node not live that stop is refused. A node whose process died holding a rental ends it
// at its next start, `failed`, billed nothing more, and stops what it started; one its process handed
// back at a clean stop runs on. (test/cluster/rentals.multi.test.ts does this with real processes.)

const CREDIT = 5_000_000;
const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const GPUS = ["gpu-a", "gpu-b"].map((id) => ({ node_id: id, gpu: "GPU", gpu_uuids: [`GPU-${id}`], vram_mb: 1, compute_cap: 9, country: "Germany", country_code: "DE", price_per_hour: 0.6, launcher: "stand-in" }));
const principal = { keyId: "key_c", accountId: "acct_c", accountName: "c", role: "user", kind: "premium", scopes: ["inference", "rental"], display: "sk-apl-…wxyz", rpm: 0, inflight: 0, maxActiveRentals: 3 } as Principal;

type Service = ReturnType<typeof createRentalsService>;

/** Ticks `node` until rental `id` runs (its launch runs in the background). */
async function untilRunning(node: Service, id: string) {
  for (let i = 0; i < 200; i++) {
    await node.tick();
    if ((await node.get(principal, id)).status === "running") return;
    await Bun.sleep(10);
  }
  throw new Error(`rental ${id} never ran`);
}

async function setUp(name: string) {
  const url = await freshDatabase(name);
  const pools: PgPools[] = [];
  const first = connectPostgres(url);
  pools.push(first);
  await migratePostgres(first.money);
  await first.money`INSERT INTO accounts (id, name, balance_micros, created_at) VALUES ('acct_c', 'c', ${CREDIT}, 1)`;
  await first.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_c', 'acct_c', 'premium', ${new Uint8Array([3])}, 'wxyz', 1)`;
  const clock = new ManualClock(Date.UTC(2026, 10, 1, 9, 0, 0));
  const calls: string[] = [];
  const live = new Set<string>();
  /** Which nodes are live, as every node's last beat saw them. */
  const up = new Set<string>();
  /** Node `self` (its GPU `gpu`): its own connections, its launcher, the rentals service as services.ts builds it on PostgreSQL. */
  const nodeOf = (self: string, gpu: number) => {
    const p = connectPostgres(url);
    pools.push(p);
    const dir = tempDir("appliance-rentals-cluster-");
    dirs.push(dir);
    const db = openStore(dir);
    const launcher: Launcher = {
      name: "stand-in",
      intent: (spec) => ({ launcher: "stand-in", data: { rentalId: spec.rentalId } }),
      start: async (spec) => (calls.push(`${self} start`), live.add(spec.rentalId), { launcher: "stand-in", url: "http://gpu/lab", data: { rentalId: spec.rentalId } }),
      probe: async (h) => (live.has(h.data.rentalId as string) ? "ready" : "dead"),
      stop: async (h) => void (calls.push(`${self} stop`), live.delete(h.data.rentalId as string)),
      reclaim: async () => void calls.push(`${self} reclaim`),
      logs: async () => "",
      health: async () => null,
    };
    const config = validateConfig({});
    const meter = createMeter(db, config, createLimits(db, config.limits, clock), clock, { ledger: postgresLedger(p.money), holds: postgresHolds(p.fast, self) });
    const cluster: RentalCluster = { self, shared: true, others: () => [], peer: (id) => (up.has(id) ? { id, url: `http://${id}.invalid` } : null) };
    return createRentalsService({ store: postgresRentalStore(p), owner: self, cluster, meter, clock, logger: memoryLogger(), dataDir: dir, nodes: () => [GPUS[gpu]!], launchers: { "stand-in": launcher }, maxHours: 10, readyTimeoutMs: 60_000, tickMs: 60_000 });
  };
  const billed = async (id: string) => (await first.money`SELECT COUNT(*) AS n FROM usage WHERE request_id LIKE ${`${id}:m%`}`)[0].n as string;
  return { clock, calls, live, up, nodeOf, billed, close: () => Promise.all(pools.map((p) => p.close())) };
}

test("a stop asked at another node leaves the rental stopping, billed no further there, and its node stops it; with its node not live the stop is refused", async () => {
  const s = await setUp("rentals_cluster_stop");
  try {
    const [a, b] = [s.nodeOf("node_a", 0), s.nodeOf("node_b", 1)];
    s.up.add("node_a").add("node_b");
    const made = await a.create(principal, { node_id: "gpu-a", type: "jupyter" }, null);
    await untilRunning(a, made.rental_id);
    expect(await a.get(principal, made.rental_id)).toMatchObject({ status: "running", billed_minutes: 1 });
    expect(await b.homeOf(principal, made.rental_id, true)).toEqual({ here: false, node: "node_a", peer: { id: "node_a", url: "http://node_a.invalid" } });

    // node_b's ticks leave it alone, its lease lapsed or not.
    s.clock.advance(90_000);
    await b.tick();
    expect(await b.get(principal, made.rental_id)).toMatchObject({ status: "running", billed_minutes: 1 });

    expect(await b.remove(principal, made.rental_id)).toMatchObject({ status: "stopping", stop_reason: "user", billed_minutes: 1 });
    expect(s.live.has(made.rental_id)).toBe(true);
    await a.tick();
    await a.stop(); // waits for the stop its tick began
    expect(await b.get(principal, made.rental_id)).toMatchObject({ status: "stopped", billed_minutes: 1 });
    expect(s.calls).toEqual(["node_a start", "node_a stop"]);

    // Another rental of node_a's, with node_a not live: the stop at node_b is refused, nothing changes.
    const again = s.nodeOf("node_a", 0);
    const second = await again.create(principal, { node_id: "gpu-a", type: "jupyter" }, null);
    s.up.delete("node_a");
    const refused = await b.remove(principal, second.rental_id).catch((e) => e);
    expect(refused).toMatchObject({ code: "rental_node_unreachable", status: 503 });
    expect(refused.message).toContain("node node_a");
    expect(await b.get(principal, second.rental_id)).toMatchObject({ status: "pending" });
    await again.stop();
    await b.stop();
  } finally {
    await s.close();
  }
}, 30_000);

test("a node's next start ends the rental its dead process held, failed, billed no further, and stops it; one its process handed back runs on", async () => {
  const s = await setUp("rentals_cluster_restart");
  try {
    const a = s.nodeOf("node_a", 0);
    const b = s.nodeOf("node_b", 1);
    const dead = await a.create(principal, { node_id: "gpu-a", type: "jupyter" }, null);
    const clean = await b.create(principal, { node_id: "gpu-b", type: "jupyter" }, null);
    await Promise.all([untilRunning(a, dead.rental_id), untilRunning(b, clean.rental_id)]);
    await b.stop(); // a clean stop hands its rentals back
    // node_a's process "dies": no stop, its lease stays its own. Minutes start meanwhile.
    s.clock.advance(150_000);
    const [a2, b2] = [s.nodeOf("node_a", 0), s.nodeOf("node_b", 1)];
    await Promise.all([a2.reconcile(), b2.reconcile()]);

    const ended = await a2.get(principal, dead.rental_id);
    expect(ended).toMatchObject({ status: "failed", stop_reason: "error", billed_minutes: 1 });
    expect(ended.failure).toContain("node node_a");
    expect(await s.billed(dead.rental_id)).toBe("1");
    expect(s.live.has(dead.rental_id)).toBe(false);
    // The one handed back runs on, billed for the minutes that started meanwhile (a restart's rule).
    await b2.tick();
    expect(await b2.get(principal, clean.rental_id)).toMatchObject({ status: "running", billed_minutes: 3 });
    expect(s.live.has(clean.rental_id)).toBe(true);
    await Promise.all([a.stop(), a2.stop(), b2.stop()]);
  } finally {
    await s.close();
  }
}, 30_000);
