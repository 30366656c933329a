import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import type { Principal } from "../../src/2-services/accounts/types";
import { createLimits } from "../../src/2-services/billing/limits";
import { createMeter } from "../../src/2-services/billing/meter";
import { costMicros, priceFor } from "../../src/2-services/billing/pricing";
import { openStore } from "../../src/4-store/db";
import { connectPostgres, migratePostgres } from "../../src/4-store/pg/db";
import { postgresHolds } from "../../src/4-store/pg/holds";
import { postgresLedger } from "../../src/4-store/pg/ledger";
import { ApiError } from "../../src/lib/errors";
import { systemClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: the meter on the PostgreSQL store (the ledger on the synchronous pool, holds on the
// asynchronous one), driven as three processes would: 450 requests, 16 in flight per process, on
// one account near a small balance. Every request is admitted or refused 402, none fails otherwise
// (an admission taking the account row FOR UPDATE deadlocked against settlements: bench store);
// the balance is the credit less the usage rows to the µ$, below zero by at most one hold, each
// request id charged at most once, and no hold is left.

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

test("three meters on one PostgreSQL, 16 requests in flight each, near a small balance: exact, no deadlock, no hold left", async () => {
  const url = await freshDatabase("meter");
  const config = validateConfig({});
  const pools = [connectPostgres(url), connectPostgres(url), connectPostgres(url)];
  await migratePostgres(pools[0]!.money);
  const credit = 200_000;
  await pools[0]!.money`INSERT INTO accounts (id, name, balance_micros, created_at) VALUES ('acct', 'acct', ${credit}, 1)`;
  await pools[0]!.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_acct', 'acct', 'premium', ${new Uint8Array([1])}, 'abcd', 1)`;
  const holdStores = pools.map((p, i) => postgresHolds(p.fast, `proc-${i}`));
  const meters = pools.map((p, i) => {
    const dir = tempDir("appliance-meter-pg-");
    dirs.push(dir);
    const db = openStore(dir);
    return createMeter(db, config, createLimits(db, config.limits, systemClock), systemClock, { ledger: postgresLedger(p.money), holds: holdStores[i]! });
  });
  const principal: Principal = { accountId: "acct", accountName: "acct", role: "user", keyId: "key_acct", kind: "premium", scopes: ["inference"], display: "sk-apl-…abcd", rpm: 0, inflight: 0, maxActiveRentals: 0 };
  const model = { id: "chat", kind: "chat" as const };
  const maxHold = costMicros(priceFor(model, config.prices), { inputTokens: 500, outputTokens: 500, images: 0 });
  const outcomes = { settled: 0, refused: 0, other: [] as string[] };
  try {
    await Promise.all(
      meters.map(async (meter, m) => {
        let next = 0;
        await Promise.all(
          Array.from({ length: 16 }, async () => {
            while (next < 150) {
              const i = next++;
              const requestId = `req-${m}-${i}`;
              try {
                const ticket = await meter.reserve(principal, { requestId, model, endpoint: "/v1/chat/completions", inputTokens: 500, maxOutputTokens: 500 });
                await ticket.settle({ inputTokens: 500, outputTokens: (i * 37) % 500 });
                outcomes.settled++;
              } catch (e) {
                if (e instanceof ApiError && e.code === "insufficient_balance") outcomes.refused++;
                else outcomes.other.push(String((e as Error).message));
              }
            }
          }),
        );
      }),
    );
    expect(outcomes.other).toEqual([]);
    expect(outcomes.settled + outcomes.refused).toBe(450);
    expect(outcomes.refused).toBeGreaterThan(0); // the balance ran out part-way
    // Each process's slice goes back once idle (its heartbeat); then nothing is held.
    await Bun.sleep(1_100);
    for (const h of holdStores) await h.heartbeat();
    const [a] = await pools[0]!.money`SELECT balance_micros AS b, (SELECT COALESCE(SUM(cost_micros), 0) FROM usage) AS spent, (SELECT COUNT(*) FROM usage) AS n, (SELECT COUNT(DISTINCT request_id) FROM usage) AS ids, (SELECT COUNT(*) FROM credit_holds) AS holds FROM accounts WHERE id = 'acct'`;
    expect(Number(a.n)).toBe(outcomes.settled);
    expect(Number(a.ids)).toBe(outcomes.settled);
    expect(Number(a.b)).toBe(credit - Number(a.spent));
    expect(Number(a.b)).toBeGreaterThan(-maxHold);
    expect(Number(a.holds)).toBe(0);
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
}, 60_000);
