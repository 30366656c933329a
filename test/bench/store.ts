import { rmSync } from "node:fs";
import { createLimits } from "../../src/2-services/billing/limits";
import { createMeter, sqliteMeterStore, type Meter } from "../../src/2-services/billing/meter";
import type { Principal } from "../../src/2-services/accounts/types";
import { openStore } from "../../src/4-store/db";
import { connectPostgres, migratePostgres } from "../../src/4-store/pg/db";
import { postgresHolds } from "../../src/4-store/pg/holds";
import { postgresLedger } from "../../src/4-store/pg/ledger";
import { systemClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { createApp } from "../../src/app";
import { createServices } from "../../src/services";
import { memoryLogger } from "../../src/lib/log";
import { openPostgresStore, sqliteStore } from "../../src/4-store/store";
import { tempDir } from "../helpers/app";
import { freshDatabase, postgresCluster } from "../helpers/postgres";
import { median } from "./stats";

// Benchmark (issue 44, the store on PostgreSQL): what a billed request costs the store — the
// meter's reserve (the credit hold) and settle (the usage row and the charge, durably) — on
// PostgreSQL (the ledger on the synchronously committing pool, holds on the asynchronous one)
// against SQLite (the embedded default: holds in memory, synchronous = FULL), at 1 and 16 requests
// in flight, in rounds alternating which goes first. Target: PostgreSQL ≤ 1.5× SQLite's time per
// request at 16 in flight (over 16 accounts; 16 in flight on one account is printed too: PostgreSQL
// admits one account's requests one at a time, across every process, to keep its balance exact). The PostgreSQL cluster is the tests' own (fsync off), so its figure
// leaves out the disk flush SQLite pays: compare the commit work, and read it as a lower bound.
// Then authenticated GET /v1/models through the whole app on each store (the key's principal is
// cached after its first use; the per-minute rate window is the store's: on PostgreSQL a round trip).

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
const PER_ROUND = Number(process.env.BENCH_REQUESTS ?? 400);

interface Side {
  name: "sqlite" | "postgres";
  meter: Meter;
  close(): Promise<void>;
}

/** Accounts (each with its key) the requests are spread over. */
const ACCOUNTS = 16;
const ids = Array.from({ length: ACCOUNTS }, (_, i) => `acct${i}`);

const config = validateConfig({});
const principal = (accountId: string): Principal => ({
  accountId,
  accountName: accountId, role: "user",
  keyId: `key_${accountId}`,
  kind: "premium",
  scopes: ["inference"],
  display: "sk-apl-…abcd",
  rpm: 0,
  inflight: 0,
  maxActiveRentals: 0,
});

async function sqliteSide(): Promise<Side> {
  const dir = tempDir("appliance-bench-store-");
  const db = openStore(dir); // synchronous = FULL, as the server opens it
  for (const id of ids) {
    db.query("INSERT INTO accounts (id, name, balance_micros, created_at) VALUES (?, ?, 1000000000000, 1)").run(id, id);
    db.query("INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES (?, ?, 'premium', ?, 'abcd', 1)").run(`key_${id}`, id, new Uint8Array(Buffer.from(id)));
  }
  const meter = createMeter(db, config, createLimits(db, config.limits, systemClock), systemClock, sqliteMeterStore(db));
  return { name: "sqlite", meter, close: async () => (db.close(), rmSync(dir, { recursive: true, force: true })) };
}

async function postgresSide(): Promise<Side> {
  const pools = connectPostgres(await freshDatabase("bench"), { max: 16 });
  await migratePostgres(pools.money);
  for (const id of ids) {
    await pools.money`INSERT INTO accounts (id, name, balance_micros, created_at) VALUES (${id}, ${id}, 1000000000000, 1)`;
    await pools.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES (${`key_${id}`}, ${id}, 'premium', ${new Uint8Array(Buffer.from(id))}, 'abcd', 1)`;
  }
  const dir = tempDir("appliance-bench-store-pg-");
  const db = openStore(dir); // only for the limits' image count, unused here
  const meter = createMeter(db, config, createLimits(db, config.limits, systemClock), systemClock, {
    ledger: postgresLedger(pools.money),
    holds: postgresHolds(pools.fast, `bench-${process.pid}`),
  });
  return { name: "postgres", meter, close: async () => (await pools.close(), db.close(), rmSync(dir, { recursive: true, force: true })) };
}

let seq = 0;
/** `n` reserve + settle cycles, `inFlight` at a time, worker w on account w mod `accounts`; the mean time per request in ms. */
async function run(side: Side, n: number, inFlight: number, accounts: number): Promise<number> {
  const model = { id: "m", kind: "chat" as const };
  const t0 = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async (_, w) => {
      const who = principal(ids[w % accounts]!);
      while (next < n) {
        next++;
        const requestId = `bench-${side.name}-${++seq}`;
        const ticket = await side.meter.reserve(who, { requestId, model, endpoint: "/v1/chat/completions", inputTokens: 100, maxOutputTokens: 100 });
        await ticket.settle({ inputTokens: 100, outputTokens: 50 });
      }
    }),
  );
  return (performance.now() - t0) / n;
}

export async function benchStore() {
  const cluster = await postgresCluster();
  const sides = [await sqliteSide(), await postgresSide()];
  console.log(`reserve + settle per request; PostgreSQL ${cluster.url("…")} (fsync off) vs SQLite (synchronous = FULL); ${ROUNDS} rounds of ${PER_ROUND} requests, alternating order (medians)`);
  let pass = true;
  // [in flight, accounts]: judged at 16 in flight over 16 accounts (several keys at work); one
  // account's requests are admitted one at a time on PostgreSQL (its exact balance), shown apart.
  for (const [inFlight, accounts] of [[1, 1], [16, 16], [16, 1]] as const) {
    const times: Record<string, number[]> = { sqlite: [], postgres: [] };
    const ratios: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 ? [...sides].reverse() : sides;
      const round: Record<string, number> = {};
      for (const s of order) round[s.name] = await run(s, PER_ROUND, inFlight, accounts);
      times.sqlite!.push(round.sqlite!);
      times.postgres!.push(round.postgres!);
      ratios.push(round.postgres! / round.sqlite!);
    }
    const ratio = median(ratios);
    const judged = inFlight === 16 && accounts === 16;
    const ok = ratio <= 1.5;
    if (judged && !ok) pass = false;
    console.log(
      `${String(inFlight).padStart(2)} in flight, ${String(accounts).padStart(2)} account(s)   sqlite ${median(times.sqlite!).toFixed(3)} ms   postgres ${median(times.postgres!).toFixed(3)} ms   ratio ${ratio.toFixed(2)}×` +
        (judged ? ` (target ≤ 1.5×) ${ok ? "PASS" : "FAIL"}` : " (reported only)"),
    );
  }
  for (const s of sides) await s.close();
  await benchModels();
  return { pass };
}

/** Authenticated GET /v1/models through createApp on each store, 1 and 16 in flight, alternating rounds. */
async function benchModels() {
  const apps: { name: string; handle: (r: Request) => Promise<Response>; key: string; capped: string; close(): Promise<void> }[] = [];
  for (const name of ["sqlite", "postgres"] as const) {
    const dir = tempDir("appliance-bench-models-");
    const store = name === "sqlite" ? sqliteStore(openStore(dir)) : await openPostgresStore(await freshDatabase("bench_models"));
    const deps = createServices(validateConfig({ server: { data_dir: dir } }), store, { logger: memoryLogger() });
    deps.heartbeat.start();
    const app = createApp(deps);
    await deps.accounts.createAccount("bench", { creditMicros: 1_000_000 });
    const { key } = await deps.accounts.createKey({ account: "bench", kind: "premium" }); // the default caps: none on a premium key
    // A key with a per-minute cap: each request takes a place in the store's rate window.
    const capped = (await deps.accounts.createKey({ account: "bench", kind: "premium", rpm: 1_000_000 })).key;
    apps.push({
      name,
      key,
      capped,
      handle: (r) => app.handle(r),
      close: async () => {
        deps.heartbeat.stop();
        deps.accounts.close();
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      },
    });
  }
  let which: "key" | "capped" = "key";
  const get = (a: (typeof apps)[number]) => a.handle(new Request("http://localhost/v1/models", { headers: { authorization: `Bearer ${a[which]}` } }));
  for (const a of apps) for (let i = 0; i < 50; i++) for (which of ["key", "capped"] as const) await (await get(a)).arrayBuffer(); // warm: principals cached, plans ready
  for (const [inFlight, key] of [[1, "key"], [16, "key"], [1, "capped"], [16, "capped"]] as const) {
    which = key;
    const times: Record<string, number[]> = { sqlite: [], postgres: [] };
    for (let r = 0; r < ROUNDS; r++) {
      for (const a of r % 2 ? [...apps].reverse() : apps) {
        const t0 = performance.now();
        let next = 0;
        await Promise.all(
          Array.from({ length: inFlight }, async () => {
            while (next++ < PER_ROUND) {
              const res = await get(a);
              if (res.status !== 200) throw new Error(`GET /v1/models on ${a.name}: ${res.status}`);
              await res.arrayBuffer();
            }
          }),
        );
        times[a.name]!.push((performance.now() - t0) / PER_ROUND);
      }
    }
    const ratios = times.sqlite!.map((t, i) => times.postgres![i]! / t);
    console.log(
      `GET /v1/models, ${key === "key" ? "no rpm cap " : "an rpm cap "}${String(inFlight).padStart(2)} in flight   sqlite ${median(times.sqlite!).toFixed(3)} ms   postgres ${median(times.postgres!).toFixed(3)} ms   ratio ${median(ratios).toFixed(2)}× (reported only)`,
    );
  }
  for (const a of apps) await a.close();
}
