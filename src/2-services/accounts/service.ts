import type { Database } from "bun:sqlite";
import { ApiError } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import type { Config } from "../../lib/config";
import { newId } from "../../lib/ids";
import { accountsRepo } from "../../4-store/accounts";
import { keysRepo, type KeyWithAccount } from "../../4-store/keys";
import { moveActiveRentals } from "../../4-store/rentals";
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

export function createAccountService(db: Database, limits: Config["limits"], clock: Clock) {
  const accounts = accountsRepo(db);
  const keys = keysRepo(db);
  const lastTouched = new Map<string, number>();
  const cache = createPrincipalCache(db);

  function accountByRef(ref: string) {
    const row = accounts.byName(ref) ?? accounts.byId(ref);
    if (!row) throw new ApiError("not_found", `account not found: ${ref}`, { param: "account" });
    return row;
  }

  function keyByRef(ref: string): KeyWithAccount {
    const row = looksLikeKey(ref) ? keys.byHash(hashKey(ref)) : keys.byId(ref);
    if (!row) throw new ApiError("not_found", `key not found: ${ref}`, { param: "key" });
    return row;
  }

  function activeKey(ref: string): KeyWithAccount {
    const row = keyByRef(ref);
    if (row.revoked_at !== null) throw new ApiError("conflict", `key ${row.id} is revoked`, { param: "key" });
    return row;
  }

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
    };
  }

  function toAccountInfo(id: string): AccountInfo {
    const row = accounts.byId(id)!;
    return {
      id: row.id,
      name: row.name,
      role: row.role,
      balance_micros: row.balance_micros,
      trial_tokens_used: row.trial_tokens_used,
      trial_tokens_remaining: Math.max(0, limits.free_trial_tokens - row.trial_tokens_used),
      created_at: row.created_at,
      active_keys: keys.listByAccount(row.id).filter((k) => k.revoked_at === null).length,
    };
  }

  function insertKey(
    accountId: string,
    kind: KeyKind,
    s: { name: string; scopes: string; max_active_rentals: number | null; rpm_limit: number | null; inflight_limit: number | null },
    rotatedFrom: string | null,
  ): { key: string; id: string } {
    const key = generateKey();
    const id = newId("key_");
    keys.insert({
      id,
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
    });
    return { key, id };
  }

  function lookup(digest: string): Principal | null {
    const hash = Buffer.from(digest, "base64");
    const row = keys.byHash(hash);
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
      kind: row.kind,
      scopes: parseScopes(row.scopes),
      display: displayKey(row.last4),
      rpm: free ? limits.free_rpm : (row.rpm_limit ?? limits.premium_rpm),
      inflight: free ? 0 : (row.inflight_limit ?? limits.premium_inflight),
      maxActiveRentals: row.max_active_rentals ?? limits.max_active_rentals,
    };
  }

  return {
    createAccount(name: string, opts: { role?: "user" | "admin"; creditMicros?: number; note?: string } = {}): AccountInfo {
      if (!ACCOUNT_NAME.test(name))
        throw new ApiError("invalid_request", "account name: 1–64 characters, letters, digits and . _ @ -", { param: "name" });
      if (accounts.byName(name)) throw new ApiError("conflict", `account already exists: ${name}`, { param: "name" });
      const id = newId("acct_");
      db.transaction(() => {
        accounts.insert({ id, name, role: opts.role ?? "user", created_at: clock.now() });
        if (opts.creditMicros) {
          assertCredit(opts.creditMicros);
          accounts.credit(id, opts.creditMicros, opts.note ?? "initial credit", clock.now());
        }
      }).immediate();
      return toAccountInfo(id);
    },

    getAccount: (ref: string) => toAccountInfo(accountByRef(ref).id),
    listAccounts: () => accounts.list().map((a) => toAccountInfo(a.id)),
    accountCount: () => accounts.count(),

    credit(ref: string, micros: number, note = "credit"): AccountInfo {
      assertCredit(micros);
      const account = accountByRef(ref);
      accounts.credit(account.id, micros, note, clock.now());
      return toAccountInfo(account.id);
    },

    createKey(opts: CreateKeyOptions): { key: string; info: KeyInfo } {
      const account = accountByRef(opts.account);
      const kind = opts.kind ?? "free";
      const scopes = normaliseScopes(opts.scopes ?? ["inference"]);
      if (kind === "free") {
        if (opts.rpm != null || opts.inflight != null)
          throw new ApiError("invalid_request", "rpm and in-flight caps are fixed on the free key; set them on premium keys", {
            param: opts.rpm != null ? "rpm" : "inflight",
          });
        if (keys.hadFreeKey(account.id))
          throw new ApiError(
            "conflict",
            `account ${account.name} already has its free key; create a premium key or rotate the free one`,
            { param: "kind" },
          );
      }
      const s = {
        name: opts.name ?? "",
        scopes: scopes.join(","),
        max_active_rentals: checkCap(opts.maxActiveRentals, "max_active_rentals"),
        rpm_limit: checkCap(opts.rpm, "rpm"),
        inflight_limit: checkCap(opts.inflight, "inflight"),
      };
      const { key, id } = db.transaction(() => insertKey(account.id, kind, s, null)).immediate();
      return { key, info: toKeyInfo(keys.byId(id)!) };
    },

    listKeys(accountRef?: string): KeyInfo[] {
      const rows = accountRef ? keys.listByAccount(accountByRef(accountRef).id) : keys.listAll();
      return rows.map(toKeyInfo);
    },

    getKey: (ref: string) => toKeyInfo(keyByRef(ref)),

    revokeKey(ref: string): KeyInfo {
      const row = keyByRef(ref);
      keys.revoke(row.id, clock.now());
      cache.clear();
      return toKeyInfo(keys.byId(row.id)!);
    },

    /** New secret, same settings; the old key is revoked in the same transaction. */
    rotateKey(ref: string): { key: string; info: KeyInfo; old: KeyInfo } {
      const { key, id, oldId } = db
        .transaction(() => {
          const old = activeKey(ref);
          keys.revoke(old.id, clock.now());
          const made = insertKey(old.account_id, old.kind, old, old.id);
          moveActiveRentals(db, old.id, made.id); // they keep running for the new secret; revoking stops them
          return { ...made, oldId: old.id };
        })
        .immediate();
      cache.clear();
      return { key, info: toKeyInfo(keys.byId(id)!), old: toKeyInfo(keys.byId(oldId)!) };
    },

    setScope(ref: string, scope: string, enabled: boolean): KeyInfo {
      const row = activeKey(ref);
      const [checked] = normaliseScopes([scope]);
      const current = new Set(parseScopes(row.scopes));
      if (enabled) current.add(checked!);
      else current.delete(checked!);
      keys.update({ ...row, scopes: SCOPES.filter((s) => current.has(s)).join(",") });
      cache.clear();
      return toKeyInfo(keys.byId(row.id)!);
    },

    setKey(ref: string, settings: KeySettings): KeyInfo {
      const row = activeKey(ref);
      if (row.kind === "free" && (settings.rpm !== undefined || settings.inflight !== undefined))
        throw new ApiError("invalid_request", "rpm and in-flight caps are fixed on the free key; set them on premium keys", {
          param: settings.rpm !== undefined ? "rpm" : "inflight",
        });
      keys.update({
        id: row.id,
        scopes: row.scopes,
        name: settings.name ?? row.name,
        max_active_rentals:
          settings.maxActiveRentals !== undefined ? checkCap(settings.maxActiveRentals, "max_active_rentals") : row.max_active_rentals,
        rpm_limit: settings.rpm !== undefined ? checkCap(settings.rpm, "rpm") : row.rpm_limit,
        inflight_limit: settings.inflight !== undefined ? checkCap(settings.inflight, "inflight") : row.inflight_limit,
      });
      cache.clear();
      return toKeyInfo(keys.byId(row.id)!);
    },

    /**
     * The principal of a key by id, revoked or not: work the key started while it was valid
     * (batch lines) goes on in its name.
     */
    /** Forget cached principals (their limits come from the config, which a reload changes). */
    dropCache(): void {
      cache.clear();
    },
    principalById(keyId: string): Principal | null {
      const row = keys.byId(keyId);
      return row ? toPrincipal(row) : null;
    },

    /** Key → principal, or null for an unknown, malformed or revoked key. */
    authenticate(key: string): Principal | null {
      if (!looksLikeKey(key)) return null;
      const digest = hashKeyBase64(key);
      const principal = cache.get(digest) ?? lookup(digest);
      if (!principal) return null;
      const now = clock.now();
      if (now - (lastTouched.get(principal.keyId) ?? 0) >= LAST_USED_RESOLUTION_MS) {
        lastTouched.set(principal.keyId, now);
        keys.touch(principal.keyId, now);
      }
      return principal;
    },
  };
}

/**
 * Valid keys seen recently, by hash. Dropped whenever this process changes a key, and whenever
 * SQLite's data_version shows a commit by another connection (the CLI revoking a key while the
 * server runs). That check costs a few microseconds, so it runs at most every `recheckMs`: a
 * change made by another process takes effect within that time, one made here at once.
 */
function createPrincipalCache(db: Database, recheckMs = 100, max = 10_000) {
  const entries = new Map<string, Principal>(); // base64 SHA-256 of the key → principal
  const dataVersion = db.query<{ data_version: number }, []>("PRAGMA data_version");
  let seen = -1;
  let checkedAt = -Infinity;
  return {
    get(digest: string): Principal | undefined {
      const now = performance.now();
      if (now - checkedAt >= recheckMs) {
        checkedAt = now;
        const v = dataVersion.get()!.data_version;
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
