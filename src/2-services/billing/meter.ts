import type { Database } from "bun:sqlite";
import type { Principal } from "../accounts/types";
import { ApiError } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import type { Config } from "../../lib/config";
import type { ModelManifest } from "../../lib/manifest";
import { memoryHolds, type HoldStore } from "../../4-store/holds";
import { LineEnded, sqliteLedger, type HoldSpend, type Ledger, type LedgerEffect } from "../../4-store/ledger";
import { usageRepo, type UsageRow } from "../../4-store/usage";
import type { Limits } from "./limits";
import { costOfMinutes } from "./minutes";
import { batchBasisPoints, costMicros, formatMicros, priceFor, type Price } from "./pricing";

// The one road to the ledger. Every engine's billable work goes through it:
//   const ticket = meter.reserve(principal, estimate)   // before work: limits + credit hold
//   ticket.settle(actualUsage)                          // on completion: one usage row, charged once
//   ticket.release()                                    // on failure: nothing charged
// or, for work that ends in one answer, meter.metered(principal, estimate, work), which does the three.
// GPU minutes of a rental are charged after the fact (meter.chargeMinutes), on the same ledger.
// Holds live in memory (one server per data dir); a crash drops them, which is a release.
// Admission needs a positive balance (or trial) after existing holds, and each hold covers its
// request's worst case, so a balance can end below zero by at most one in-flight reservation.

export interface MeterRequest {
  requestId: string;
  model: Pick<ModelManifest, "id" | "kind" | "price">;
  endpoint: string;
  inputTokens: number;
  /** Worst-case output tokens (max_tokens, or what the context leaves). */
  maxOutputTokens: number;
  images?: number;
  /** Batch lines: batch price, and no per-minute or in-flight limits (spec §8). */
  batch?: boolean;
  /** The price when it is not the model's own (a chat model's /v1/decisions: decisionPriceFor). */
  price?: Price;
}

export interface ActualUsage {
  inputTokens: number;
  outputTokens: number;
  cachedTokens?: number;
  images?: number;
}

export interface Settlement {
  costMicros: number;
  trialTokens: number;
  /** False when this request id had already been settled (nothing charged the second time). */
  charged: boolean;
}

export interface Ticket {
  readonly requestId: string;
  /**
   * Resolves once the usage row and the charge are committed (a durable write). `effect` commits
   * in the same transaction, with the charge or not at all; a batch line that had already ended
   * gates the charge off, and the settlement rejects with LineEnded.
   */
  settle(usage: ActualUsage, effect?: LedgerEffect): Promise<Settlement>;
  /** Resolves once the hold, the in-flight place and any image places are free (a caller may leave it unawaited). */
  release(): Promise<void>;
}

export type Meter = ReturnType<typeof createMeter>;

/**
 * `store`: where settlements commit and credit is held (default: the SQLite ledger of `db`, and
 * holds in this process's memory).
 */
export function createMeter(
  db: Database | null,
  config: Pick<Config, "limits" | "prices">,
  limits: Limits,
  clock: Clock,
  store?: { ledger: Ledger; holds: HoldStore },
) {
  const { ledger, holds } = store ?? sqliteMeterStore(db ?? noStore());
  const commits = groupCommit(ledger);

  /** Free keys spend the account's token trial on token-metered work; images have their own quota. */
  function usesTrial(p: Principal, req: MeterRequest) {
    return p.kind === "free" && req.model.kind !== "image";
  }

  async function reserve(p: Principal, req: MeterRequest): Promise<Ticket> {
    const price = req.price ?? priceFor(req.model, config.prices);
    const images = req.images ?? 0;
    const bp = req.batch ? batchBasisPoints(config.prices) : null; // read per request: prices reload
    const holdMicros =
      p.kind === "premium" ? costMicros(price, { inputTokens: req.inputTokens, outputTokens: req.maxOutputTokens, images }, bp) : 0;
    const holdTokens = usesTrial(p, req) ? req.inputTokens + req.maxOutputTokens : 0;

    const refusal = await holds.admit(
      { requestId: req.requestId, accountId: p.accountId, micros: holdMicros, tokens: holdTokens },
      { money: p.kind === "premium", trialLimit: holdTokens ? config.limits.free_trial_tokens : null },
    );
    if (refusal?.reason === "unknown_account") throw new ApiError("invalid_api_key", "Invalid API key");
    if (refusal?.reason === "balance")
      throw new ApiError(
        "insufficient_balance",
        `insufficient balance: ${formatMicros(refusal.balance)} left` +
          (refusal.held ? ` with ${formatMicros(refusal.held)} held by requests in flight` : "") +
          "; add credit to the account to continue",
      );
    if (refusal?.reason === "trial")
      throw new ApiError(
        "free_quota_exhausted",
        `the free trial of ${config.limits.free_trial_tokens} tokens is used up; use a premium key to continue`,
      );

    let leaveInflight: () => Promise<void> = async () => {};
    let releaseImages: (refund?: boolean) => Promise<void> = async () => {};
    try {
      if (!req.batch) leaveInflight = await limits.enter(p);
      if (images > 0 && !req.batch) releaseImages = await limits.images(p, images);
    } catch (e) {
      await leaveInflight();
      await holds.release(req.requestId);
      throw e;
    }

    let state: "held" | "settled" | "released" = "held";
    /**
     * Frees what the request held; resolves once it is free, so the request is answered only then
     * and the client's next one finds its place (a shared store drops them in round trips).
     * `settled`: the settlement committed: what the request held is spent.
     */
    const drop = async (settled = false) => {
      await Promise.all([
        // a hold that cannot be dropped lapses with its process (PostgreSQL) or dies with it (memory)
        holds.release(req.requestId, settled).catch(() => {}),
        leaveInflight(),
        releaseImages(),
      ]);
    };

    return {
      requestId: req.requestId,
      settle(actual: ActualUsage, effect?: LedgerEffect): Promise<Settlement> {
        if (state !== "held") throw new Error(`ticket ${req.requestId} is already ${state}`);
        state = "settled";
        const n = actual.images ?? 0;
        const cost = p.kind === "premium" ? costMicros(price, { ...actual, images: n }, bp) : 0;
        const trialTokens = usesTrial(p, req) ? actual.inputTokens + actual.outputTokens : 0;
        // The hold is dropped only once the charge is committed: until then it still counts.
        return commits
          .add({
            request_id: req.requestId,
            account_id: p.accountId,
            key_id: p.keyId,
            model: req.model.id,
            endpoint: req.endpoint,
            input_tokens: actual.inputTokens,
            output_tokens: actual.outputTokens,
            cached_tokens: actual.cachedTokens ?? 0,
            images: n,
            batch: req.batch ? 1 : 0,
            cost_micros: cost,
            trial_tokens: trialTokens,
            created_at: clock.now(),
          }, effect, holds.spendOf?.(req.requestId))
          .then(
            async (charged) => {
              await drop(true);
              return { costMicros: charged ? cost : 0, trialTokens: charged ? trialTokens : 0, charged };
            },
            async (e) => {
              await drop();
              throw e;
            },
          );
      },
      async release() {
        if (state !== "held") return;
        state = "released";
        await drop();
      },
    };
  }

  /**
   * reserve → run → settle, for work that ends in one answer: `work` returns its result, the usage
   * to charge and what to commit with the charge; if it throws, the hold is released and nothing
   * is charged.
   */
  async function metered<T>(p: Principal, req: MeterRequest, work: () => Promise<Metered<T>>): Promise<T> {
    const ticket = await reserve(p, req);
    let done: Metered<T>;
    try {
      done = await work();
    } catch (e) {
      await ticket.release();
      throw e;
    }
    await ticket.settle(done.usage, done.effect);
    return done.result;
  }

  /**
   * A rental's GPU minutes from `from` (already billed) up to `upTo`, at its price: no hold (the
   * minutes are already used), one usage row keyed by rental and minute so that a repeat charges
   * nothing, and the rental's billed minutes committed with it — only if it still had billed
   * `from` ("stale" otherwise: another path billed meanwhile, nothing charged). "unpaid" (nothing
   * charged) when the balance cannot pay them: the caller stops the rental.
   */
  async function chargeMinutes(r: MinutesCharge): Promise<"charged" | "repeat" | "unpaid" | "stale"> {
    const cost = costOfMinutes(r.pricePerHourMicros, r.upTo) - costOfMinutes(r.pricePerHourMicros, r.from);
    if (cost > ((await ledger.balance(r.accountId))?.balance_micros ?? 0)) return "unpaid";
    const row: UsageRow = {
      request_id: `${r.rentalId}:m${r.upTo}`,
      account_id: r.accountId,
      key_id: r.keyId,
      model: `gpu:${r.nodeId}`,
      endpoint: "/api/v1/rentals",
      input_tokens: 0,
      output_tokens: 0,
      cached_tokens: 0,
      images: 0,
      batch: 0,
      cost_micros: cost,
      trial_tokens: 0,
      created_at: r.at,
    };
    const [out] = await ledger.settle([{ row, effect: { kind: "rental_minutes", rentalId: r.rentalId, from: r.from, upTo: r.upTo, costMicros: cost } }]);
    if ("error" in out!) throw out.error;
    return "ended" in out! ? "stale" : out!.charged ? "charged" : "repeat";
  }

  /** The account's balance in micro-dollars (0 for an unknown account). */
  async function balance(accountId: string): Promise<number> {
    return (await ledger.balance(accountId))?.balance_micros ?? 0;
  }

  /** What requests in flight hold of the account's credit and trial. */
  const held = (accountId: string) => holds.held(accountId);

  return { reserve, held, metered, chargeMinutes, balance };
}

/** What metered work returns: its answer, what it used, and what commits with the charge. */
export interface Metered<T> {
  result: T;
  usage: ActualUsage;
  effect?: LedgerEffect;
}

export interface MinutesCharge {
  rentalId: string;
  accountId: string;
  keyId: string;
  nodeId: string;
  pricePerHourMicros: number;
  /** Minutes billed before; minutes billed after this charge. */
  from: number;
  upTo: number;
  /** When (the usage row's time). */
  at: number;
}

/**
 * Settlements made in the same turn of the event loop are committed in one transaction: one
 * synced write instead of one per request when many requests finish together (a micro-batch, a
 * busy server). Each caller's promise resolves only after the commit, so nothing is acknowledged
 * before it is durable. A settlement that fails rejects only its own promise (a failed commit
 * rejects them all and charges none); one whose batch line had ended rejects with LineEnded.
 */
function groupCommit(ledger: Ledger) {
  let pending: { row: UsageRow; effect?: LedgerEffect; spend?: HoldSpend; done: (charged: boolean) => void; fail: (e: unknown) => void }[] = [];
  const flush = async () => {
    const batch = pending;
    pending = [];
    let results: Awaited<ReturnType<Ledger["settle"]>>;
    try {
      results = await ledger.settle(batch.map((b) => ({ row: b.row, effect: b.effect, spend: b.spend })));
    } catch (e) {
      for (const b of batch) b.fail(e);
      return;
    }
    batch.forEach((b, i) => {
      const r = results[i]!;
      if ("error" in r) b.fail(r.error);
      else if ("ended" in r) b.fail(new LineEnded(`batch line ${b.effect?.kind === "batch_line" ? `${b.effect.batchId}:${b.effect.line}` : ""} had already ended`));
      else b.done(r.charged);
    });
  };
  return {
    add(row: UsageRow, effect?: LedgerEffect, spend?: HoldSpend): Promise<boolean> {
      return new Promise((done, fail) => {
        if (pending.length === 0) setImmediate(() => void flush());
        pending.push({ row, effect, spend, done, fail });
      });
    },
  };
}

/** The meter's store on SQLite: the ledger in the database, holds in this process's memory. */
export function sqliteMeterStore(db: Database): { ledger: Ledger; holds: HoldStore } {
  const usage = usageRepo(db);
  return { ledger: sqliteLedger(db), holds: memoryHolds((id) => usage.balance(id) ?? null) };
}

function noStore(): never {
  throw new Error("the meter needs a SQLite handle or a store");
}
