import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ApiError } from "../../src/1-api/http/errors";
import type { MeterRequest } from "../../src/2-services/billing/meter";
import { costMicros, priceFor } from "../../src/2-services/billing/pricing";
import { BACKENDS, backendApp, type BackendApp } from "../helpers/backends";
import type { TestApp } from "../helpers/app";

// The meter (reserve, settle, release; group commit; refusals; exactness under concurrency; GPU
// minutes), one suite on SQLite and on PostgreSQL (issue 44).

const chat = { id: "chat", kind: "chat" as const };

for (const backend of BACKENDS) describe(`on ${backend}`, () => {
  let b: BackendApp;
  let t: TestApp;
  let meter: TestApp["deps"]["meter"];
  let accounts: TestApp["deps"]["accounts"];
  let prices: TestApp["deps"]["config"]["prices"];
  beforeAll(async () => {
    b = await backendApp(backend);
    t = b.t;
    ({ meter, accounts } = t.deps);
    prices = t.deps.config.prices;
  });
  afterAll(() => t.close());

  function request(id: string, inputTokens = 100, maxOutputTokens = 50, extra: Partial<MeterRequest> = {}): MeterRequest {
    return { requestId: id, model: chat, endpoint: "/v1/chat/completions", inputTokens, maxOutputTokens, ...extra };
  }

  async function ledger(accountName: string) {
    const [row] = await b.rows<{ balance: number; trial_used: number; credits: number; cost: number; trial: number; rows: number }>(
        `SELECT a.balance_micros AS balance, a.trial_tokens_used AS trial_used,
           (SELECT COALESCE(SUM(amount_micros), 0) FROM credits c WHERE c.account_id = a.id) AS credits,
           (SELECT COALESCE(SUM(cost_micros), 0) FROM usage u WHERE u.account_id = a.id) AS cost,
           (SELECT COALESCE(SUM(trial_tokens), 0) FROM usage u WHERE u.account_id = a.id) AS trial,
           (SELECT COUNT(*) FROM usage u WHERE u.account_id = a.id) AS rows
         FROM accounts a WHERE a.name = ?`,
        accountName,
      );
    return row!;
  }

  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  describe("reserve, settle, release", () => {
    test("a settled premium request is charged its actual cost once", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "p1", kind: "premium", creditUsd: 1 })))!;
      const ticket = await meter.reserve(p, request("r1", 1000, 4000));
      expect((await meter.held(p.accountId)).micros).toBe(costMicros(priceFor(chat, prices), { inputTokens: 1000, outputTokens: 4000, images: 0 }));
      const s = await ticket.settle({ inputTokens: 1000, outputTokens: 10, cachedTokens: 200 });
      expect(s).toEqual({ costMicros: 137, trialTokens: 0, charged: true });
      expect(await meter.held(p.accountId)).toEqual({ micros: 0, tokens: 0 });
      expect(await ledger("p1")).toMatchObject({ balance: 1_000_000 - 137, cost: 137, rows: 1 });
      expect((await b.rows("SELECT cached_tokens, endpoint, model FROM usage WHERE request_id = 'r1'"))[0]).toEqual({
        cached_tokens: 200,
        endpoint: "/v1/chat/completions",
        model: "chat",
      });
      expect(() => ticket.settle({ inputTokens: 1, outputTokens: 1 })).toThrow(/already settled/);
    });

    test("the same request id is charged once even if settled by two tickets", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "p2", kind: "premium", creditUsd: 1 })))!;
      expect((await (await meter.reserve(p, request("dup"))).settle({ inputTokens: 100, outputTokens: 100 })).charged).toBe(true);
      expect(await (await meter.reserve(p, request("dup"))).settle({ inputTokens: 100, outputTokens: 100 })).toEqual({ costMicros: 0, trialTokens: 0, charged: false });
      expect((await ledger("p2")).rows).toBe(1);
    });

    test("a released request is charged nothing and frees its hold", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "p3", kind: "premium", creditUsd: 1 })))!;
      const ticket = await meter.reserve(p, request("gone"));
      await ticket.release();
      await ticket.release();
      expect(await meter.held(p.accountId)).toEqual({ micros: 0, tokens: 0 });
      expect(await ledger("p3")).toMatchObject({ balance: 1_000_000, rows: 0 });
    });

    test("batch requests pay the batch share of the live price", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "p4", kind: "premium", creditUsd: 1 })))!;
      const s = await (await meter.reserve(p, request("b1", 0, 0, { batch: true }))).settle({ inputTokens: 1_000_000, outputTokens: 0 });
      expect(s.costMicros).toBe(60_000);
    });

    test("a free key spends the account's trial tokens, not its balance", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "f1", kind: "free" })))!;
      const s = await (await meter.reserve(p, request("f1r"))).settle({ inputTokens: 120, outputTokens: 30 });
      expect(s).toEqual({ costMicros: 0, trialTokens: 150, charged: true });
      expect((await accounts.getAccount("f1")).trial_tokens_remaining).toBe(250_000 - 150);
    });
  });

  describe("group commit", () => {
    test("settlements of one moment commit together, and each resolves only once committed", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "grouped", kind: "premium", creditUsd: 1 })))!;
      const tickets = await Promise.all(Array.from({ length: 20 }, (_, i) => meter.reserve(p, request(`g-${i}`, 10, 10))));
      const settled = tickets.map((tk) => tk.settle({ inputTokens: 10, outputTokens: 10 }));
      // Not acknowledged yet: nothing is in the store and the holds still count. (Read at once:
      // SQLite's read is synchronous; PostgreSQL's would wait out the group's commit.)
      if (backend === "sqlite") expect(t.deps.db!.query("SELECT COUNT(*) AS n FROM usage u JOIN accounts a ON a.id = u.account_id WHERE a.name = 'grouped'").get()).toEqual({ n: 0 });
      expect((await meter.held(p.accountId)).micros).toBeGreaterThan(0);
      const results = await Promise.all(settled);
      expect(results.every((r) => r.charged)).toBe(true);
      expect(await ledger("grouped")).toMatchObject({ rows: 20, cost: results.reduce((n, r) => n + r.costMicros, 0) });
      expect(await meter.held(p.accountId)).toEqual({ micros: 0, tokens: 0 });
    });

    test("a row that cannot be written fails only its own settlement", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "one-bad", kind: "premium", creditUsd: 1 })))!;
      const ghost = { ...p, keyId: "key_does_not_exist" }; // violates the foreign key on usage.key_id
      const good = (await meter.reserve(p, request("ok-1"))).settle({ inputTokens: 5, outputTokens: 5 });
      const bad = (await meter.reserve(ghost, request("bad-1"))).settle({ inputTokens: 5, outputTokens: 5 });
      expect((await good).charged).toBe(true);
      await expect(bad).rejects.toThrow(/foreign key/i);
      expect((await ledger("one-bad")).rows).toBe(1);
      expect(await meter.held(p.accountId)).toEqual({ micros: 0, tokens: 0 });
    });
  });

  describe("refusals", () => {
    const code = async (f: () => Promise<unknown>) => {
      try {
        await f();
      } catch (e) {
        return e instanceof ApiError ? { code: e.code, status: e.status, message: e.message } : e;
      }
      return null;
    };

    test("an empty premium balance is 402 insufficient_balance", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "broke", kind: "premium" })))!;
      expect(await code(() => meter.reserve(p, request("x")))).toMatchObject({ code: "insufficient_balance", status: 402 });
    });

    test("a used-up free trial is 402 free_quota_exhausted", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "f2", kind: "free" })))!;
      await b.run("UPDATE accounts SET trial_tokens_used = 250000 WHERE name = 'f2'");
      expect(await code(() => meter.reserve(p, request("x")))).toMatchObject({ code: "free_quota_exhausted", status: 402 });
    });

    test("holds of requests in flight count against what is left", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "tight", kind: "premium", creditUsd: 0.001 })))!;
      const big = await meter.reserve(p, request("big", 0, 1000)); // holds $0.0017 > $0.001
      const refused = await code(() => meter.reserve(p, request("next")));
      expect(refused).toMatchObject({ code: "insufficient_balance" });
      expect((refused as { message: string }).message).toContain("held by requests in flight");
      await big.release();
      await (await meter.reserve(p, request("next"))).release();
    });
  });

  describe("concurrent requests leave the ledger exactly consistent", () => {
    test("300 interleaved premium requests across two keys of one account", async () => {
      const name = "busy";
      const k1 = (await accounts.authenticate(await t.key({ account: name, kind: "premium", creditUsd: 0.05 })))!;
      const k2 = (await accounts.authenticate(await t.key({ account: name, kind: "premium" })))!;
      const start = (await ledger(name)).balance;
      let maxHold = 0;
      const outcomes = { settled: 0, released: 0, refused: 0 };
      await Promise.all(
        Array.from({ length: 300 }, async (_, i) => {
          await sleep(i % 7);
          const maxOut = 200 + ((i * 37) % 400);
          const req = request(`busy-${i}`, 50 + (i % 90), maxOut);
          maxHold = Math.max(maxHold, costMicros(priceFor(chat, prices), { inputTokens: req.inputTokens, outputTokens: maxOut, images: 0 }));
          let ticket;
          try {
            ticket = await meter.reserve(i % 2 ? k1 : k2, req);
          } catch (e) {
            expect((e as ApiError).code).toBe("insufficient_balance");
            outcomes.refused++;
            return;
          }
          await sleep((i * 13) % 11);
          if (i % 10 === 3) {
            await ticket.release();
            outcomes.released++;
          } else {
            await ticket.settle({ inputTokens: req.inputTokens, outputTokens: (i * 17) % maxOut });
            outcomes.settled++;
          }
        }),
      );
      const l = await ledger(name);
      expect(outcomes.settled + outcomes.released + outcomes.refused).toBe(300);
      expect(outcomes.refused).toBeGreaterThan(0); // the balance ran out part-way
      expect(outcomes.settled).toBeGreaterThan(20);
      expect(l.rows).toBe(outcomes.settled);
      expect(start - l.balance).toBe(l.cost); // sum of usage rows = decrease of balance
      expect(l.balance).toBe(l.credits - l.cost);
      expect(l.balance).toBeGreaterThan(-maxHold); // never below zero by more than one reservation
      expect(await meter.held(k1.accountId)).toEqual({ micros: 0, tokens: 0 });
    });

    test("250 interleaved free-key requests spend the trial exactly", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "trial", kind: "free" })))!;
      const maxHold = 3000;
      let settled = 0;
      let refused = 0;
      await Promise.all(
        Array.from({ length: 250 }, async (_, i) => {
          await sleep(i % 5);
          let ticket;
          try {
            ticket = await meter.reserve(p, request(`trial-${i}`, 1000, 2000));
          } catch (e) {
            expect((e as ApiError).code).toBe("free_quota_exhausted");
            refused++;
            return;
          }
          await sleep((i * 7) % 9);
          await ticket.settle({ inputTokens: 1000, outputTokens: (i * 31) % 2000 });
          settled++;
        }),
      );
      const l = await ledger("trial");
      expect(refused).toBeGreaterThan(0);
      expect(l.rows).toBe(settled);
      expect(l.trial_used).toBe(l.trial);
      expect(l.trial_used - 250_000).toBeLessThan(maxHold);
      expect(l.balance).toBe(0);
    });
  });

  // Issue 44: GPU minutes go through the ledger, asynchronously: two charges of one rental in flight
  // together, both computed from the minutes it had billed (a tick's and a stop's), charge once —
  // the second finds the rental's billed minutes moved on and is refused ("stale"), not billed again.
  describe("GPU minutes", () => {
    test("two charges from the same billed minutes in flight together: one charged, the other stale; repeats charge nothing", async () => {
      const p = (await accounts.authenticate(await t.key({ account: "renter", kind: "premium", creditUsd: 1, scopes: ["inference", "rental"] })))!;
      await b.run("INSERT INTO rentals (id, key_id, account_id, node_id, type, status, price_per_hour_micros, token, launcher, created_at, running_at, billed_minutes, cost_micros) VALUES ('rent_m', ?, ?, 'n', 'jupyter', 'running', 600000, 't', 'process', 0, 0, 1, 10000)", p.keyId, p.accountId);
      const charge = (upTo: number) => meter.chargeMinutes({ rentalId: "rent_m", accountId: p.accountId, keyId: p.keyId, nodeId: "n", pricePerHourMicros: 600_000, from: 1, upTo, at: 1 });
      const outcomes = await Promise.all([charge(3), charge(4)]); // the shorter first: the longer, from the same start, would bill minutes 2–3 twice
      expect(outcomes.sort()).toEqual(["charged", "stale"]);
      const r = (await b.rows<{ m: number; c: number }>("SELECT billed_minutes AS m, cost_micros AS c FROM rentals WHERE id = 'rent_m'"))[0]!;
      expect(await charge(r.m)).toBe("repeat"); // the charge that went through, sent again: its id is taken
      const spent = (await ledger("renter")).cost;
      expect(r.c - 10_000).toBe(spent); // what the rental records billed is what the ledger charged
      expect(spent).toBe((r.m - 1) * 10_000);
      expect((await ledger("renter")).balance).toBe(1_000_000 - spent);
    });
  });
});
