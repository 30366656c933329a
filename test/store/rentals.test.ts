import { afterAll, afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { Database } from "bun:sqlite";
import { rmSync } from "node:fs";
import { createLimits } from "../../src/2-services/billing/limits";
import { createMeter, type Meter } from "../../src/2-services/billing/meter";
import { costOfMinutes } from "../../src/2-services/billing/minutes";
import { openStore } from "../../src/4-store/db";
import { connectPostgres, migratePostgres } from "../../src/4-store/pg/db";
import { postgresHolds } from "../../src/4-store/pg/holds";
import { postgresLedger } from "../../src/4-store/pg/ledger";
import { postgresRentalStore } from "../../src/4-store/pg/rentals";
import { sqliteRentalStore, type RentalInsert, type RentalStore } from "../../src/4-store/rentals";
import { systemClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// The rental store on a real SQLite file and on PostgreSQL (issue 44), one suite: a creation is
// idempotent per key and Idempotency-Key and refused as its `admit` says (one rental per node, also
// when two keys race for it); the active ones are listed; a state moves only along the state
// machine; a rental's tick lease has one owner at a time and is taken over once it lapses; and GPU
// minutes charged through the meter (the ledger's rental_minutes effect) are charged once each.

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const PRICE = 600_000; // $0.60 an hour: 10_000 µ$ a minute
const CREDIT = 5_000_000;
const LONG = 60_000;

interface Opened {
  store: RentalStore;
  /** Another connection to the same database: what a second process sees. */
  other: () => RentalStore;
  meter: Meter;
  balance: () => Promise<number>;
  usage: (rentalId: string) => Promise<{ request_id: string; cost_micros: number }[]>;
  close: () => Promise<void>;
}

const seed = [
  "INSERT INTO accounts (id, name, balance_micros, created_at) VALUES ('acct_a', 'a', 5000000, 1)",
  "INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_a', 'acct_a', 'premium', X'01', 'abcd', 1)",
  "INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_b', 'acct_a', 'premium', X'02', 'efgh', 1)",
];

async function onSqlite(): Promise<Opened> {
  const dir = tempDir("appliance-rentals-store-");
  dirs.push(dir);
  const db: Database = openStore(dir, { synchronous: "normal" });
  for (const q of seed) db.run(q);
  const config = validateConfig({});
  const usage = db.query<{ request_id: string; cost_micros: number }, [string]>("SELECT request_id, cost_micros FROM usage WHERE request_id LIKE ? ORDER BY id");
  return {
    store: sqliteRentalStore(db),
    other: () => sqliteRentalStore(db),
    meter: createMeter(db, config, createLimits(db, config.limits, systemClock), systemClock),
    balance: async () => db.query<{ b: number }, []>("SELECT balance_micros AS b FROM accounts WHERE id = 'acct_a'").get()!.b,
    usage: async (id) => usage.all(`${id}:%`),
    close: async () => db.close(),
  };
}

async function onPostgres(): Promise<Opened> {
  const url = await freshDatabase("rentals");
  const pools = connectPostgres(url);
  await migratePostgres(pools.money);
  for (const q of seed) await pools.money.unsafe(q.replace("X'01'", "'\\x01'::bytea").replace("X'02'", "'\\x02'::bytea"));
  const more = [pools];
  const dir = tempDir("appliance-rentals-store-");
  dirs.push(dir);
  const db = openStore(dir, { synchronous: "normal" }); // the limits' home only: the meter charges on PostgreSQL
  const config = validateConfig({});
  return {
    store: postgresRentalStore(pools),
    other: () => postgresRentalStore((more[more.length] = connectPostgres(url))),
    meter: createMeter(db, config, createLimits(db, config.limits, systemClock), systemClock, { ledger: postgresLedger(pools.money), holds: postgresHolds(pools.fast, "test") }),
    balance: async () => Number((await pools.money`SELECT balance_micros AS b FROM accounts WHERE id = 'acct_a'`)[0].b),
    usage: async (id) =>
      (await pools.money`SELECT request_id, cost_micros FROM usage WHERE request_id LIKE ${`${id}:%`} ORDER BY id`).map((r: { request_id: string; cost_micros: string }) => ({ request_id: r.request_id, cost_micros: Number(r.cost_micros) })),
    close: async () => {
      db.close();
      await Promise.all(more.map((p) => p.close()));
    },
  };
}

let n = 0;
function row(over: Partial<RentalInsert> = {}): RentalInsert {
  return { id: `rent_${++n}`, key_id: "key_a", account_id: "acct_a", node_id: "node-1", type: "jupyter", price_per_hour_micros: PRICE, hours: null, token: "t".repeat(40), launcher: "process", created_at: Date.now() + n, ...over };
}

/** A creation as the rentals service makes it: one rental per node and up to `max` per key. */
function creation(r: RentalInsert, o: { idem?: string; hash?: string; max?: number; owner?: string; leaseMs?: number } = {}) {
  return {
    keyId: r.key_id,
    nodeId: r.node_id,
    now: Date.now(),
    idempotency: o.idem ? { key: o.idem, bodyHash: o.hash ?? "h1", ttlMs: 86_400_000 } : null,
    admit(found: { activeForKey: number; nodeTaken: boolean }) {
      if (found.nodeTaken) throw new Error("node taken");
      if (found.activeForKey >= (o.max ?? 10)) throw new Error("too many");
      return r;
    },
    lease: { owner: o.owner ?? "proc-a", ms: o.leaseMs ?? LONG },
  };
}

for (const [backend, open] of [["SQLite", onSqlite], ["PostgreSQL", onPostgres]] as const) {
  describe(`the rental store on ${backend}`, () => {
    let s: Opened;
    beforeEach(async () => {
      s = await open();
    });
    afterEach(() => s.close());

    test("a creation is idempotent per key and Idempotency-Key: the same body finds the first rental, another body is reused, another key's same Idempotency-Key is its own", async () => {
      const first = await s.store.create(creation(row(), { idem: "k1" }));
      expect(first).toMatchObject({ created: true, row: { status: "pending", key_id: "key_a", billed_minutes: 0, lease_owner: "proc-a" } });
      const id = "row" in first ? first.row.id : "";
      expect(await s.store.create(creation(row({ node_id: "node-2" }), { idem: "k1" }))).toMatchObject({ created: false, row: { id } });
      expect(await s.store.create(creation(row({ node_id: "node-2" }), { idem: "k1", hash: "h2" }))).toEqual({ reused: true });
      expect(await s.store.create(creation(row({ key_id: "key_b", node_id: "node-2" }), { idem: "k1" }))).toMatchObject({ created: true });
      expect((await s.store.active()).map((r) => r.node_id).sort()).toEqual(["node-1", "node-2"]);
      // Twenty at once with one key: one rental, found by all (each from its own connection on PostgreSQL).
      const stores = Array.from({ length: 4 }, () => s.other());
      const all = await Promise.all(Array.from({ length: 20 }, (_, i) => stores[i % 4]!.create(creation(row({ node_id: "node-3" }), { idem: "k2" }))));
      expect(all.filter((o) => "created" in o && o.created)).toHaveLength(1);
      expect(new Set(all.map((o) => ("row" in o ? o.row.id : "reused")))).toHaveProperty("size", 1);
      expect(await s.store.forgetRequestsBefore(Date.now() + 1)).toBe(3);
    });

    test("admit sees the key's active rentals and whether the node is taken; a refusal inserts nothing; two keys racing for one node get one rental", async () => {
      await s.store.create(creation(row()));
      await expect(s.store.create(creation(row()))).rejects.toThrow("node taken");
      await expect(s.store.create(creation(row({ node_id: "node-2" }), { max: 1 }))).rejects.toThrow("too many");
      expect(await s.store.active()).toHaveLength(1);
      const racers = [s.other(), s.other()];
      await Promise.all(racers.map((st) => st.active())); // connected: the creations below start together
      for (let round = 0; round < 6; round++) {
        const node = `node-race-${round}`;
        const out = await Promise.allSettled(racers.map((st, i) => st.create(creation(row({ node_id: node, key_id: i ? "key_b" : "key_a" })))));
        expect(out.map((o) => o.status).sort()).toEqual(["fulfilled", "rejected"]);
        expect(String((out.find((o) => o.status === "rejected") as PromiseRejectedResult).reason)).toContain("node taken");
        expect((await s.store.active()).filter((r) => r.node_id === node)).toHaveLength(1);
      }
    });

    test("reads: active ones, by id, a key's and an account's newest first, and the totals", async () => {
      const a = row({ created_at: 1000 });
      const b = row({ node_id: "node-2", key_id: "key_b", created_at: 2000 });
      await s.store.create(creation(a));
      await s.store.create(creation(b));
      await s.store.markStopping(a.id, { at: 3000, reason: "user" });
      await s.store.markEnded(a.id, 4000);
      expect((await s.store.active()).map((r) => r.id)).toEqual([b.id]);
      expect(await s.store.byId(a.id)).toMatchObject({ id: a.id, status: "stopped", stopped_at: 4000, price_per_hour_micros: PRICE, hours: null, lease_owner: null });
      expect(await s.store.byId("rent_none")).toBeNull();
      expect((await s.store.byKey("key_a", 10)).map((r) => r.id)).toEqual([a.id]);
      expect((await s.store.byAccount("acct_a", 10)).map((r) => r.id)).toEqual([b.id, a.id]);
      expect((await s.store.byAccount("acct_a", 1)).map((r) => r.id)).toEqual([b.id]);
      expect(await s.store.totals()).toEqual({ active: 1, minutes: 0, costMicros: 0 });
    });

    test("a state moves only along the machine: pending → running → stopping → stopped, an error ends failed; every other move is refused", async () => {
      const r = row({ hours: 1.5 });
      await s.store.create(creation(r));
      expect(await s.store.markEnded(r.id, 1)).toBeNull(); // pending does not end without stopping
      expect(await s.store.markRunning(r.id, 100, 200)).toBe(true);
      expect(await s.store.markRunning(r.id, 101, 201)).toBe(false);
      expect(await s.store.markEnded(r.id, 1)).toBeNull();
      expect(await s.store.markStopping(r.id, { at: 150, reason: "auto_stop" })).toBe(true);
      expect(await s.store.markStopping(r.id, { at: 151, reason: "user" })).toBe(false);
      expect(await s.store.markRunning(r.id, 102, 202)).toBe(false);
      expect(await s.store.markEnded(r.id, 160)).toBe("stopped");
      expect(await s.store.markEnded(r.id, 161)).toBeNull();
      expect(await s.store.markStopping(r.id, { at: 170, reason: "user" })).toBe(false);
      expect(await s.store.byId(r.id)).toMatchObject({ status: "stopped", stop_reason: "auto_stop", running_at: 100, expires_at: 200, stopping_at: 150, stopped_at: 160, hours: 1.5 });

      const f = row({ node_id: "node-2" });
      await s.store.create(creation(f));
      await s.store.setIntent(f.id, '{"launcher":"process"}');
      await s.store.setHandle(f.id, '{"launcher":"process","url":"http://x"}');
      expect(await s.store.markStopping(f.id, { at: 5, reason: "error", failure: "it broke" })).toBe(true);
      expect(await s.store.markEnded(f.id, 6)).toBe("failed");
      expect(await s.store.byId(f.id)).toMatchObject({ status: "failed", stop_reason: "error", failure: "it broke", launch_intent: '{"launcher":"process"}', handle: '{"launcher":"process","url":"http://x"}' });
    });

    test("a rental's lease has one owner at a time, is renewed by it, and is taken over once it lapses or is handed back", async () => {
      const a = row();
      await s.store.create(creation(a, { owner: "proc-a" }));
      const b = s.other();
      expect(await b.claimActive("proc-b", LONG)).toEqual([]);
      expect(await b.claim(a.id, "proc-b", LONG)).toBe(false);
      // Its own lease is renewed by a claim only once half of it has passed: a tick a second does not write the row every second.
      const until0 = (await s.store.byId(a.id))!.lease_until!;
      await Bun.sleep(20);
      expect((await s.store.claimActive("proc-a", LONG)).map((r) => r.id)).toEqual([a.id]);
      expect((await s.store.byId(a.id))!.lease_until).toBe(until0);
      expect(await s.store.renewLeases("proc-a", LONG)).toBe(1); // the heartbeat renews in any case
      expect((await s.store.byId(a.id))!.lease_until!).toBeGreaterThan(until0);
      expect(await s.store.renewLeases("proc-b", LONG)).toBe(0);

      // A lease that is not renewed lapses (the database's clock), and then another owner takes it.
      const c = row({ node_id: "node-2" });
      await s.store.create(creation(c, { owner: "proc-a", leaseMs: 2000 }));
      expect(await b.claim(c.id, "proc-b", LONG)).toBe(false);
      await Bun.sleep(2500);
      expect((await b.claimActive("proc-b", LONG)).map((r) => r.id)).toEqual([c.id]);
      expect((await s.store.claimActive("proc-a", LONG)).map((r) => r.id)).toEqual([a.id]);
      expect((await s.store.byId(c.id))!.lease_owner).toBe("proc-b");

      // Handed back: taken at once. An ended rental has no lease to take.
      await s.store.releaseLeases("proc-a");
      expect(await b.claim(a.id, "proc-b", LONG)).toBe(true);
      await b.markStopping(c.id, { at: 1, reason: "user" });
      await b.markEnded(c.id, 2);
      expect(await s.store.claim(c.id, "proc-a", LONG)).toBe(false);
      expect((await b.claimActive("proc-b", LONG)).map((r) => r.id)).toEqual([a.id]);

      // Three claimants at once over six lapsed leases: each rental is held by exactly one.
      await b.releaseLeases("proc-b");
      for (let i = 0; i < 5; i++) await s.store.create(creation(row({ node_id: `node-x${i}` }), { owner: "gone", leaseMs: 1 }));
      await Bun.sleep(50);
      const claimants = ["p1", "p2", "p3"].map((o) => ({ o, st: s.other() }));
      const got = await Promise.all(claimants.map(({ o, st }) => st.claimActive(o, LONG)));
      const ids = got.flat().map((r) => r.id);
      expect(ids).toHaveLength(6);
      expect(new Set(ids).size).toBe(6);
    });

    test("a rental a cluster node launched is leased by that node alone: another node takes it neither lapsed nor handed back; a rental of no node is anyone's", async () => {
      const mine = row({ cluster_node: "node_a" });
      const old = row({ node_id: "node-2" });
      await s.store.create(creation(mine, { owner: "node_a", leaseMs: 1 }));
      await s.store.create(creation(old, { owner: "gone", leaseMs: 1 }));
      expect((await s.store.byId(mine.id))!.cluster_node).toBe("node_a");
      expect((await s.store.byId(old.id))!.cluster_node).toBeNull();
      await Bun.sleep(50);
      const b = s.other();
      expect((await b.claimActive("node_b", LONG, "node_b")).map((r) => r.id)).toEqual([old.id]);
      expect(await b.claim(mine.id, "node_b", LONG, "node_b")).toBe(false);
      await s.store.releaseLeases("node_a");
      expect(await b.claim(mine.id, "node_b", LONG, "node_b")).toBe(false);
      expect((await b.claimActive("node_b", LONG, "node_b")).map((r) => r.id)).toEqual([old.id]);
      // Its own node takes it back; without a node (one process on its own), any owner may.
      expect((await s.store.claimActive("node_a", LONG, "node_a")).map((r) => r.id)).toEqual([mine.id]);
      await s.store.releaseLeases("node_a");
      expect(await b.claim(mine.id, "proc-x", LONG)).toBe(true);
    });

    test("GPU minutes charged through the meter's ledger effect are charged once each: a repeat or a stale count charges nothing", async () => {
      const r = row();
      await s.store.create(creation(r));
      await s.store.markRunning(r.id, Date.now(), null);
      const charge = (from: number, upTo: number) =>
        s.meter.chargeMinutes({ rentalId: r.id, accountId: "acct_a", keyId: "key_a", nodeId: "node-1", pricePerHourMicros: PRICE, from, upTo, at: Date.now() });
      expect(await charge(0, 1)).toBe("charged");
      expect(await charge(0, 1)).toBe("repeat");
      expect(await charge(0, 2)).toBe("stale"); // computed from 0 minutes billed: the rental has 1
      expect(await charge(1, 3)).toBe("charged");
      // Two charges from the same count at once (two processes' ticks): one is charged, the other is stale.
      const both = await Promise.all([charge(3, 4), charge(3, 5)]);
      expect(both.sort()).toEqual(["charged", "stale"]);
      const got = (await s.store.byId(r.id))!;
      const rows = await s.usage(r.id);
      expect(rows.reduce((t, u) => t + u.cost_micros, 0)).toBe(costOfMinutes(PRICE, got.billed_minutes));
      expect(got.cost_micros).toBe(costOfMinutes(PRICE, got.billed_minutes));
      expect([4, 5]).toContain(got.billed_minutes);
      expect(rows.map((u) => u.request_id)).toEqual([`${r.id}:m1`, `${r.id}:m3`, `${r.id}:m${got.billed_minutes}`]);
      expect(await s.balance()).toBe(CREDIT - got.cost_micros);
      expect(await s.store.totals()).toEqual({ active: 1, minutes: got.billed_minutes, costMicros: got.cost_micros });
    });
  });
}
