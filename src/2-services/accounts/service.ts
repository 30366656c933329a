import { ApiError } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import type { Config } from "../../lib/config";
import { newId } from "../../lib/ids";
import type { AccountRow, AccountStore, ChangeMark, KeyWithAccount, NewKey } from "../../4-store/accounts";
import { displayKey, generateKey, hashKey, hashKeyBase64, looksLikeKey, sameHash } from "./key-format";
import { SCOPES, type AccountInfo, type KeyInfo, type KeyKind, type Principal, type Scope } from "./types";

// Accounts and keys: the one service the API, the console and the CLI all use.

const ACCOUNT_NAME = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/;
const LAST_USED_RESOLUTION_MS = 60_000;

export interface CreateKeyOptions {
  account: string;
  kind?: KeyKind;
  name?: string;
  scopes?: Scope[];
  maxActiveRentals?: number | null;
  rpm?: number | null;
  inflight?: number | null;
}

export interface KeySettings {
  name?: string;
  maxActiveRentals?: number | null;
  rpm?: number | null;
  inflight?: number | null;
}

export type AccountService = ReturnType<typeof createAccountService>;

export function createAccountService(store: AccountStore, limits: Config["limits"], clock: Clock) {
  const lastTouched = new Map<string, number>();
  const cache = createPrincipalCache(store.changes());

  async function accountByRef(ref: string) {
    const row = (await store.accountByName(ref)) ?? (await store.accountById(ref));
    if (!row) throw new ApiError("not_found", `account not found: ${ref}`, { param: "account" });
    return row;
  }

  async function keyByRef(ref: string): Promise<KeyWithAccount> {
    const row = looksLikeKey(ref) ? await store.keyByHash(hashKey(ref)) : await store.keyById(ref);
    if (!row) throw new ApiError("not_found", `key not found: ${ref}`, { param: "key" });
    return row;
  }

  async function activeKey(ref: string): Promise<KeyWithAccount> {
    const row = await keyByRef(ref);
    if (row.revoked_at !== null) throw new ApiError("conflict", `key ${row.id} is revoked`, { param: "key" });
    // Its settings are the account's defaults, and a rotation would hand out a secret: it only gets revoked.
    if (row.purpose === "console") throw new ApiError("conflict", `key ${row.id} is the console's own key of account ${row.account_name}; it can only be revoked (the console makes a new one)`, { param: "key" });
    return row;
  }

  const keyInfo = async (id: string) => toKeyInfo((await store.keyById(id))!);

  function toKeyInfo(row: KeyWithAccount): KeyInfo {
    return {
      id: row.id,
      account: row.account_name,
      kind: row.kind,
      name: row.name,
      display: displayKey(row.last4),
      scopes: parseScopes(row.scopes),
      max_active_rentals: row.max_active_rentals ?? limits.max_active_rentals,
      rpm_limit: row.kind === "free" ? limits.free_rpm : row.rpm_limit,
      inflight_limit: row.kind === "free" ? null : row.inflight_limit,
      created_at: row.created_at,
      last_used_at: row.last_used_at,
      revoked_at: row.revoked_at,
      rotated_from: row.rotated_from,
      purpose: row.purpose,
    };
  }

  async function toAccountInfo(id: string): Promise<AccountInfo> {
    const row = (await store.accountById(id))!;
    return accountInfo(row, (await store.keysByAccount(row.id)).filter((k) => k.revoked_at === null).length);
  }

  function accountInfo(row: AccountRow, activeKeys: number): AccountInfo {
    return {
      id: row.id,
      name: row.name,
      role: row.role,
      balance_micros: row.balance_micros,
      trial_tokens_used: row.trial_tokens_used,
      trial_tokens_remaining: Math.max(0, limits.free_trial_tokens - row.trial_tokens_used),
      created_at: row.created_at,
      active_keys: activeKeys,
    };
  }

  function newKey(
    accountId: string,
    kind: KeyKind,
    s: { name: string; scopes: string; max_active_rentals: number | null; rpm_limit: number | null; inflight_limit: number | null },
    rotatedFrom: string | null,
  ): { key: string; row: NewKey } {
    const key = generateKey();
    return {
      key,
      row: {
        id: newId("key_"),
        account_id: accountId,
        kind,
        name: s.name,
        scopes: s.scopes,
        max_active_rentals: s.max_active_rentals,
        rpm_limit: s.rpm_limit,
        inflight_limit: s.inflight_limit,
        secret_hash: hashKey(key),
        last4: key.slice(-4),
        created_at: clock.now(),
        rotated_from: rotatedFrom,
      },
    };
  }

  async function lookup(digest: string): Promise<Principal | null> {
    const hash = Buffer.from(digest, "base64");
    const row = await store.keyByHash(hash);
    if (!row || row.revoked_at !== null || !sameHash(row.secret_hash, hash)) return null;
    const principal = toPrincipal(row);
    cache.set(digest, principal);
    return principal;
  }

  function toPrincipal(row: KeyWithAccount): Principal {
    const free = row.kind === "free";
    return {
      keyId: row.id,
      accountId: row.account_id,
      accountName: row.account_name,
      role: row.account_role,
      kind: row.kind,
      scopes: parseScopes(row.scopes),
      display: displayKey(row.last4),
      rpm: free ? limits.free_rpm : (row.rpm_limit ?? limits.premium_rpm),
      inflight: free ? 0 : (row.inflight_limit ?? limits.premium_inflight),
      maxActiveRentals: row.max_active_rentals ?? limits.max_active_rentals,
    };
  }

  const freeCapsFixed = (param: string) =>
    new ApiError("invalid_request", "rpm and in-flight caps are fixed on the free key; set them on premium keys", { param });

  return {
    async createAccount(name: string, opts: { role?: "user" | "admin"; creditMicros?: number; note?: string } = {}): Promise<AccountInfo> {
      if (!ACCOUNT_NAME.test(name))
        throw new ApiError("invalid_request", "account name: 1–64 characters, letters, digits and . _ @ -", { param: "name" });
      if (opts.creditMicros) assertCredit(opts.creditMicros);
      const id = newId("acct_");
      const first = opts.creditMicros ? { micros: opts.creditMicros, note: opts.note ?? "initial credit" } : undefined;
      if (!(await store.createAccount({ id, name, role: opts.role ?? "user", created_at: clock.now() }, first)))
        throw new ApiError("conflict", `account already exists: ${name}`, { param: "name" });
      return toAccountInfo(id);
    },

    getAccount: async (ref: string) => toAccountInfo((await accountByRef(ref)).id),
    /** Every account, from two reads (not two per account: on PostgreSQL each is a round trip). */
    async listAccounts(): Promise<AccountInfo[]> {
      const [rows, keys] = await Promise.all([store.listAccounts(), store.allKeys()]);
      const active = new Map<string, number>();
      for (const k of keys) if (k.revoked_at === null && k.purpose !== "console") active.set(k.account_id, (active.get(k.account_id) ?? 0) + 1);
      return rows.map((a) => accountInfo(a, active.get(a.id) ?? 0));
    },
    accountCount: () => store.countAccounts(),

    async credit(ref: string, micros: number, note = "credit"): Promise<AccountInfo> {
      assertCredit(micros);
      const account = await accountByRef(ref);
      await store.credit(account.id, micros, note, clock.now());
      return toAccountInfo(account.id);
    },

    async createKey(opts: CreateKeyOptions): Promise<{ key: string; info: KeyInfo }> {
      const account = await accountByRef(opts.account);
      const kind = opts.kind ?? "free";
      const scopes = normaliseScopes(opts.scopes ?? ["inference"]);
      if (kind === "free" && (opts.rpm != null || opts.inflight != null)) throw freeCapsFixed(opts.rpm != null ? "rpm" : "inflight");
      const s = {
        name: opts.name ?? "",
        scopes: scopes.join(","),
        max_active_rentals: checkCap(opts.maxActiveRentals, "max_active_rentals"),
        rpm_limit: checkCap(opts.rpm, "rpm"),
        inflight_limit: checkCap(opts.inflight, "inflight"),
      };
      const { key, row } = newKey(account.id, kind, s, null);
      if (!(await store.insertKey(row)))
        throw new ApiError("conflict", `account ${account.name} already has its free key; create a premium key or rotate the free one`, { param: "kind" });
      return { key, info: await keyInfo(row.id) };
    },

    async listKeys(accountRef?: string): Promise<KeyInfo[]> {
      const rows = accountRef ? await store.keysByAccount((await accountByRef(accountRef)).id) : await store.allKeys();
      return rows.map(toKeyInfo);
    },

    getKey: async (ref: string) => toKeyInfo(await keyByRef(ref)),

    async revokeKey(ref: string): Promise<KeyInfo> {
      const row = await keyByRef(ref);
      await store.revokeKey(row.id, clock.now());
      cache.clear();
      return keyInfo(row.id);
    },

    /** New secret, same settings; the old key is revoked in the same transaction. */
    async rotateKey(ref: string): Promise<{ key: string; info: KeyInfo; old: KeyInfo }> {
      const old = await activeKey(ref);
      const { key, row } = newKey(old.account_id, old.kind, old, old.id);
      // Active rentals move to the new key in the same transaction: they keep running for the new secret.
      const rotated = await store.rotateKey(old.id, row, clock.now());
      cache.clear();
      if (!rotated) throw new ApiError("conflict", `key ${old.id} is revoked`, { param: "key" });
      return { key, info: await keyInfo(row.id), old: await keyInfo(old.id) };
    },

    async setScope(ref: string, scope: string, enabled: boolean): Promise<KeyInfo> {
      const row = await activeKey(ref);
      const [checked] = normaliseScopes([scope]);
      const current = new Set(parseScopes(row.scopes));
      if (enabled) current.add(checked!);
      else current.delete(checked!);
      await store.updateKey({ ...row, scopes: SCOPES.filter((s) => current.has(s)).join(",") });
      cache.clear();
      return keyInfo(row.id);
    },

    async setKey(ref: string, settings: KeySettings): Promise<KeyInfo> {
      const row = await activeKey(ref);
      if (row.kind === "free" && (settings.rpm !== undefined || settings.inflight !== undefined))
        throw freeCapsFixed(settings.rpm !== undefined ? "rpm" : "inflight");
      await store.updateKey({
        id: row.id,
        scopes: row.scopes,
        name: settings.name ?? row.name,
        max_active_rentals:
          settings.maxActiveRentals !== undefined ? checkCap(settings.maxActiveRentals, "max_active_rentals") : row.max_active_rentals,
        rpm_limit: settings.rpm !== undefined ? checkCap(settings.rpm, "rpm") : row.rpm_limit,
        inflight_limit: settings.inflight !== undefined ? checkCap(settings.inflight, "inflight") : row.inflight_limit,
      });
      cache.clear();
      return keyInfo(row.id);
    },

    /** Forget cached principals (their limits come from the config, which a reload changes). */
    dropCache(): void {
      cache.clear();
    },

    /**
     * The principal of a key by id, revoked or not: work the key started while it was valid
     * (batch lines) goes on in its name.
     */
    async principalById(keyId: string): Promise<Principal | null> {
      const row = await store.keyById(keyId);
      return row ? toPrincipal(row) : null;
    },

    /**
     * Who a signed-in console session acts as (issue 48): the account, through its console key (a
     * premium key the server makes on first use; its secret is random, never kept, never shown, so
     * the key is only ever used this way), which bills the account's credit. An account without
     * credit that still holds its free key acts through that key instead: its trial and limits.
     */
    async consolePrincipal(accountId: string): Promise<Principal> {
      const account = await store.accountById(accountId);
      if (!account) throw new ApiError("not_signed_in", "the session's account no longer exists");
      if (account.balance_micros <= 0) {
        const free = (await store.keysByAccount(accountId)).find((k) => k.kind === "free" && k.revoked_at === null && k.purpose !== "console");
        if (free) return toPrincipal(free);
      }
      const fresh = newKey(accountId, "premium", { name: "Console", scopes: "inference", max_active_rentals: 0, rpm_limit: null, inflight_limit: null }, null).row;
      return toPrincipal(await store.consoleKey(accountId, fresh));
    },

    /** The principal of an active key by id (a hop from a node that served a console session names it); null when revoked or unknown. */
    async activePrincipalById(keyId: string): Promise<Principal | null> {
      const row = await store.keyById(keyId);
      return row && row.revoked_at === null ? toPrincipal(row) : null;
    },

    /** Key → principal, or null for an unknown, malformed or revoked key. */
    async authenticate(key: string): Promise<Principal | null> {
      if (!looksLikeKey(key)) return null;
      const digest = hashKeyBase64(key);
      const principal = cache.get(digest) ?? (await lookup(digest));
      if (!principal) return null;
      const now = clock.now();
      if (now - (lastTouched.get(principal.keyId) ?? 0) >= LAST_USED_RESOLUTION_MS) {
        lastTouched.set(principal.keyId, now);
        store.touchKey(principal.keyId, now);
      }
      return principal;
    },

    /** Stops watching for key changes made elsewhere. */
    close: () => cache.stop(),
  };
}

/**
 * Valid keys seen recently, by hash. Dropped whenever this process changes a key, and whenever the
 * store's change mark moves (SQLite: a commit by another connection, such as the CLI revoking a key
 * while the server runs; PostgreSQL: a key change notified or polled from any process). The mark
 * is read at most every `recheckMs`: a change made elsewhere takes effect within that time (plus,
 * on PostgreSQL, the notification's delay or one poll), one made here at once.
 */
function createPrincipalCache(mark: ChangeMark, recheckMs = 100, max = 10_000) {
  const entries = new Map<string, Principal>(); // base64 SHA-256 of the key → principal
  let seen = -1;
  let checkedAt = -Infinity;
  return {
    get(digest: string): Principal | undefined {
      const now = performance.now();
      if (now - checkedAt >= recheckMs) {
        checkedAt = now;
        const v = mark.read();
        if (v !== seen) {
          entries.clear();
          seen = v;
          return undefined;
        }
      }
      return entries.get(digest);
    },
    set(digest: string, p: Principal) {
      if (entries.size >= max) entries.clear();
      entries.set(digest, p);
    },
    clear: () => entries.clear(),
    stop: () => mark.stop(),
  };
}

function parseScopes(text: string): Scope[] {
  return text ? (text.split(",") as Scope[]) : [];
}

function normaliseScopes(scopes: string[]): Scope[] {
  for (const s of scopes)
    if (!(SCOPES as readonly string[]).includes(s))
      throw new ApiError("invalid_request", `unknown scope "${s}" (scopes: ${SCOPES.join(", ")})`, { param: "scope" });
  return SCOPES.filter((s) => scopes.includes(s));
}

function checkCap(v: number | null | undefined, param: string): number | null {
  if (v === undefined || v === null) return null;
  if (!Number.isInteger(v) || v < 0 || v > 1_000_000)
    throw new ApiError("invalid_request", `${param} must be a whole number from 0 to 1000000`, { param });
  return v;
}

function assertCredit(micros: number) {
  if (!Number.isSafeInteger(micros) || micros <= 0)
    throw new ApiError("invalid_request", "credit must be a positive amount (at least $0.000001)", { param: "amount" });
}
