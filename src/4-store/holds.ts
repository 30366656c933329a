import type { Balance, HoldSpend } from "./ledger";

// Credit holds (issue 44): what requests in flight have reserved and not yet settled. Admission
// needs balance left after them (a premium key) or trial tokens left after them (a free key), so an
// account ends below zero by at most one request's worst case. One interface, two homes: this
// process's memory when the store is SQLite (one server per data dir; a crash drops the holds,
// which is a release), the database when it is PostgreSQL (pg/holds.ts: every process sees every
// hold, and a process that is gone has its holds released by the others).

export interface Hold {
  requestId: string;
  accountId: string;
  micros: number;
  tokens: number;
}

/** money: the balance must cover more than the holds; trialLimit: the trial's size, when the trial must have tokens left. */
export interface AdmitRule {
  money: boolean;
  trialLimit: number | null;
}

export type Refusal = { reason: "unknown_account" } | { reason: "balance"; balance: number; held: number } | { reason: "trial" };

export interface HoldStore {
  /** Takes the hold if the account may: null when taken, else why not (nothing held then). */
  admit(hold: Hold, rule: AdmitRule): Promise<Refusal | null>;
  /**
   * Drops a hold (idempotent). `settled`: the request was charged, so what it held is spent (a
   * PostgreSQL slice shrinks by it); otherwise it is free again.
   */
  release(requestId: string, settled?: boolean): Promise<void>;
  /**
   * The database hold a settlement of this request spends in its own transaction (PostgreSQL);
   * undefined where holds are not in the database. A release with `settled` after such a
   * settlement then only frees what this process counts.
   */
  spendOf?(requestId: string): HoldSpend | undefined;
  held(accountId: string): Promise<{ micros: number; tokens: number }>;
}

/** Decides one admission from the account's balance and what is already held. Pure. */
export function refusalOf(account: Balance | null, held: { micros: number; tokens: number }, rule: AdmitRule): Refusal | null {
  if (!account) return { reason: "unknown_account" };
  if (rule.money && account.balance_micros - held.micros <= 0) return { reason: "balance", balance: account.balance_micros, held: held.micros };
  if (rule.trialLimit !== null && rule.trialLimit - account.trial_tokens_used - held.tokens <= 0) return { reason: "trial" };
  return null;
}

/** Holds in this process's memory, against balances read synchronously (the SQLite store). */
export function memoryHolds(balance: (accountId: string) => Balance | null): HoldStore {
  const byAccount = new Map<string, { micros: number; tokens: number }>();
  const byRequest = new Map<string, Hold>();
  const held = (accountId: string) => byAccount.get(accountId) ?? { micros: 0, tokens: 0 };
  const add = (accountId: string, micros: number, tokens: number) => {
    const h = held(accountId);
    const next = { micros: h.micros + micros, tokens: h.tokens + tokens };
    if (next.micros === 0 && next.tokens === 0) byAccount.delete(accountId);
    else byAccount.set(accountId, next);
  };
  return {
    // Check and take with no await between them: nothing else runs in between.
    async admit(hold, rule) {
      const refusal = refusalOf(balance(hold.accountId), held(hold.accountId), rule);
      if (refusal) return refusal;
      if (byRequest.has(hold.requestId)) throw new Error(`request ${hold.requestId} already holds credit`);
      byRequest.set(hold.requestId, hold);
      add(hold.accountId, hold.micros, hold.tokens);
      return null;
    },
    async release(requestId) {
      const h = byRequest.get(requestId);
      if (!h) return;
      byRequest.delete(requestId);
      add(h.accountId, -h.micros, -h.tokens);
    },
    held: async (accountId) => held(accountId),
  };
}
