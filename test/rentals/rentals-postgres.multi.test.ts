import { afterAll, expect, test } from "bun:test";
import type { FileSink, Subprocess } from "bun";
import { rmSync } from "node:fs";
import { join } from "node:path";
import type { Principal } from "../../src/2-services/accounts/types";
import { createLimits } from "../../src/2-services/billing/limits";
import { createMeter } from "../../src/2-services/billing/meter";
import { costOfMinutes, minutesStarted } from "../../src/2-services/billing/minutes";
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
import type { TicksConfig } from "../fixtures/rentals/billing-ticks";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: GPU rentals billed by several processes on one PostgreSQL store. Three Bun processes
// (test/fixtures/rentals/billing-ticks.ts: the real rentals service and meter) tick the same three
// running rentals on a clock 60 times the wall's (a wall second is a billed minute) for ten
// minutes. Each rental's ticks are run by the process holding its lease: before any kill, each
// rental is charged by one process only and no charge ever finds another's in its way (stale or
// repeat). The process holding the leases is killed with SIGKILL mid-run: another takes them over
// once they lapse (1.5 s) and bills on, catching up the minutes that started meanwhile. At the end
// each rental has billed exactly its ten minutes, its usage rows tile them once (no minute lost or
// doubled), and the account paid exactly what the rows say. And a stop asked of a process that
// does not hold the rental's lease ends the billing there, while the holder stops what it started.

const FIXTURE = join(import.meta.dir, "../fixtures/rentals/billing-ticks.ts");
const PRICE = 600_000;
const CREDIT = 5_000_000;
const SPEED = 60;
const MINUTES = 10;
const RENTALS = ["rent_m1", "rent_m2", "rent_m3"];
const NODES = ["node-m1", "node-m2", "node-m3"];

interface Charge {
  owner: string;
  rental: string;
  from: number;
  upTo: number;
  out: string;
}

const procs: Subprocess[] = [];
const dirs: string[] = [];
afterAll(() => {
  procs.forEach((p) => p.killed || p.kill("SIGKILL"));
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

/** Reads a process's JSON lines as they come. */
function lines(p: Subprocess<"pipe", "pipe", "inherit">, into: (o: Record<string, unknown>) => void) {
  void (async () => {
    let buf = "";
    const dec = new TextDecoder();
    for await (const chunk of p.stdout) {
      buf += dec.decode(chunk, { stream: true });
      let i: number;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        if (line.startsWith("{")) into(JSON.parse(line));
      }
    }
  })();
}

async function until(ok: () => boolean | Promise<boolean>, ms: number, what: string) {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(50);
  }
}

test("three processes bill three rentals each minute exactly once; after a kill -9 of the lease holder another takes over with no minute lost or doubled", async () => {
  const url = await freshDatabase("rentals_multi");
  const pg = connectPostgres(url);
  try {
    await migratePostgres(pg.money);
    await pg.money`INSERT INTO accounts (id, name, balance_micros, created_at) VALUES ('acct_m', 'm', ${CREDIT}, 1)`;
    await pg.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_m', 'acct_m', 'premium', ${new Uint8Array([1])}, 'abcd', 1)`;
    const t0 = Date.UTC(2026, 10, 1, 9, 0, 0);
    const handle = JSON.stringify({ launcher: "stand-in", url: "http://gpu/lab", data: {} });
    for (const [i, id] of RENTALS.entries())
      await pg.money`INSERT INTO rentals (id, key_id, account_id, node_id, type, status, price_per_hour_micros, token, launcher, handle, created_at, running_at)
        VALUES (${id}, 'key_m', 'acct_m', ${NODES[i]}, 'jupyter', 'running', ${PRICE}, ${"t".repeat(40)}, 'stand-in', ${handle}, ${t0}, ${t0})`;

    // Ten simulated minutes, the last millisecond of the tenth included: ten minutes started each.
    const end = t0 + MINUTES * 60_000 - 1;
    const charges: Charge[] = [];
    const ready = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const cfg: TicksConfig = { url, owner: `proc-${i}`, t0, speed: SPEED, end, leaseMs: 1500, tickMs: 200, nodes: NODES };
      const p = Bun.spawn([process.execPath, FIXTURE, JSON.stringify(cfg)], { stdout: "pipe", stderr: "inherit", stdin: "pipe" });
      procs.push(p);
      lines(p, (o) => (o.ready ? ready.add(o.owner as string) : charges.push(o as unknown as Charge)));
    }
    await until(() => ready.size === 3, 30_000, "three processes to start");
    // The simulated clock starts for all three at once, now that they are up.
    const w0 = String(Date.now());
    for (const p of procs) {
      const stdin = p.stdin as FileSink;
      stdin.write(`${w0}\n`);
      stdin.flush();
    }

    // The holder of the first rental's lease, once it has billed three minutes of it.
    const holderOf = async (id: string) => (await pg.money`SELECT lease_owner FROM rentals WHERE id = ${id}`)[0].lease_owner as string | null;
    await until(() => charges.some((c) => c.rental === RENTALS[0] && c.out === "charged" && c.upTo >= 3), 30_000, "three minutes billed");
    const victim = (await holderOf(RENTALS[0]!))!;
    expect(victim).toMatch(/^proc-\d$/);
    const victimProc = procs[Number(victim.slice(5))]!;
    victimProc.kill("SIGKILL");
    await victimProc.exited;

    // Another process takes the leases over and bills every rental to its tenth minute.
    const billed = async (): Promise<{ id: string; minutes: number; cost: number; owner: string | null }[]> => (await pg.money`SELECT id, billed_minutes, cost_micros, lease_owner FROM rentals ORDER BY id`).map((r: Record<string, unknown>) => ({ id: r.id as string, minutes: Number(r.billed_minutes), cost: Number(r.cost_micros), owner: r.lease_owner as string | null }));
    const takenOver = (r: { minutes: number; owner: string | null }) => r.minutes === MINUTES && r.owner !== null && r.owner !== victim;
    await until(async () => (await billed()).every(takenOver), 40_000, "every rental to bill its ten minutes, held by a process still alive");
    const rows = await billed();

    for (const p of procs) if (p !== victimProc) p.kill("SIGTERM");
    await Promise.all(procs.map((p) => p.exited));

    expect(minutesStarted(t0, end)).toBe(MINUTES);
    let paid = 0;
    for (const r of rows) {
      // The rental's usage rows tile its minutes once: each row charges the minutes after the one before.
      const usage = (await pg.money`SELECT request_id, cost_micros FROM usage WHERE request_id LIKE ${`${r.id}:m%`}`).map((u: { request_id: string; cost_micros: string }) => ({
        upTo: Number(u.request_id.slice(u.request_id.lastIndexOf(":m") + 2)),
        cost: Number(u.cost_micros),
      }));
      usage.sort((a: { upTo: number }, b: { upTo: number }) => a.upTo - b.upTo);
      expect(usage.length).toBeGreaterThan(0);
      expect(usage.length).toBeLessThanOrEqual(MINUTES);
      expect(usage.at(-1)!.upTo).toBe(MINUTES);
      let before = 0;
      for (const u of usage) {
        expect(u.cost).toBe(costOfMinutes(PRICE, u.upTo) - costOfMinutes(PRICE, before));
        before = u.upTo;
      }
      expect(r.cost).toBe(costOfMinutes(PRICE, MINUTES));
      paid += r.cost;

      // One process at a time: in billing order, this rental's charges come from the victim, then from
      // the one process that took it over (charges from several processes at once would interleave).
      const order = charges.filter((c) => c.rental === r.id).sort((x, y) => x.from - y.from).map((c) => c.owner);
      const runs = order.filter((o, i) => i === 0 || o !== order[i - 1]);
      expect(runs.length).toBeLessThanOrEqual(2);
      expect(runs.at(-1)).not.toBe(victim);
      if (runs.length === 2) expect(runs[0]).toBe(victim);
    }
    // No charge ever met another process's in its way, and the charges that were made are the rows.
    expect(charges.filter((c) => c.out !== "charged")).toEqual([]);
    const [acct] = await pg.money`SELECT balance_micros FROM accounts WHERE id = 'acct_m'`;
    expect(Number(acct.balance_micros)).toBe(CREDIT - paid);
    const [sum] = await pg.money`SELECT COALESCE(SUM(cost_micros), 0) AS s, COUNT(*) AS n FROM usage`;
    expect(Number(sum.s)).toBe(paid);
    expect(paid).toBe(RENTALS.length * costOfMinutes(PRICE, MINUTES));
  } finally {
    await pg.close();
  }
}, 60_000);

test("a DELETE in a process that does not hold the rental's lease bills it to now and leaves it stopping; the holder stops what it launched at its next tick", async () => {
  const url = await freshDatabase("rentals_stop");
  const pools: PgPools[] = [connectPostgres(url), connectPostgres(url)];
  const clock = new ManualClock(Date.UTC(2026, 10, 1, 9, 0, 0));
  const config = validateConfig({});
  const calls: string[] = [];
  const live = new Set<string>();
  try {
    await migratePostgres(pools[0]!.money);
    await pools[0]!.money`INSERT INTO accounts (id, name, balance_micros, created_at) VALUES ('acct_s', 's', ${CREDIT}, 1)`;
    await pools[0]!.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_s', 'acct_s', 'premium', ${new Uint8Array([2])}, 'wxyz', 1)`;
    const node = { node_id: NODES[0]!, gpu: "GPU", gpu_uuids: ["GPU-1"], vram_mb: 1, compute_cap: 9, country: "Germany", country_code: "DE", price_per_hour: 0.6, launcher: "stand-in" };
    /** One process: its own connections, lease owner and launcher (what it starts, it can stop). */
    const processOf = (p: PgPools, owner: string) => {
      const dir = tempDir("appliance-rentals-stop-");
      dirs.push(dir);
      const db = openStore(dir);
      const launcher: Launcher = {
        name: "stand-in",
        intent: (spec) => ({ launcher: "stand-in", data: { rentalId: spec.rentalId } }),
        start: async (spec) => (calls.push(`${owner} start`), live.add(spec.rentalId), { launcher: "stand-in", url: "http://gpu/lab", data: { rentalId: spec.rentalId } }),
        probe: async (h) => (live.has(h.data.rentalId as string) ? "ready" : "dead"),
        stop: async (h) => void (calls.push(`${owner} stop`), live.delete(h.data.rentalId as string)),
        reclaim: async () => void calls.push(`${owner} reclaim`),
        logs: async () => "",
        health: async () => null,
      };
      const meter = createMeter(db, config, createLimits(db, config.limits, clock), clock, { ledger: postgresLedger(p.money), holds: postgresHolds(p.fast, owner) });
      return createRentalsService({ store: postgresRentalStore(p), owner, meter, clock, logger: memoryLogger(), dataDir: dir, nodes: () => [node], launchers: { "stand-in": launcher }, maxHours: 10, readyTimeoutMs: 60_000, tickMs: 60_000 });
    };
    const [a, b] = [processOf(pools[0]!, "proc-a"), processOf(pools[1]!, "proc-b")];
    const principal = { keyId: "key_s", accountId: "acct_s", accountName: "s", role: "user", kind: "premium", scopes: ["inference", "rental"], display: "sk-apl-…wxyz", rpm: 0, inflight: 0, maxActiveRentals: 2 } as Principal;

    const made = await a.create(principal, { node_id: node.node_id, type: "jupyter" }, null);
    await until(() => live.has(made.rental_id), 10_000, "the launch");
    await b.tick(); // the lease is a's: b neither probes nor bills it
    expect(await b.get(principal, made.rental_id)).toMatchObject({ status: "pending", billed_minutes: 0 });
    await a.tick();
    expect(await a.get(principal, made.rental_id)).toMatchObject({ status: "running", billed_minutes: 1 });

    clock.advance(90_000);
    expect(await b.remove(principal, made.rental_id)).toMatchObject({ status: "stopping", stop_reason: "user", billed_minutes: 2, cost: 0.02 });
    expect(live.has(made.rental_id)).toBe(true);
    expect(await b.gpus()).toEqual([]); // its node stays taken until what was launched is gone
    await a.tick();
    await a.stop(); // waits for the stop its tick began
    expect(await b.get(principal, made.rental_id)).toMatchObject({ status: "stopped", stop_reason: "user", billed_minutes: 2 });
    expect(calls).toEqual(["proc-a start", "proc-a stop"]);
    expect((await b.gpus()).map((n) => n.node_id)).toEqual([node.node_id]);
    await b.stop();
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
}, 30_000);
