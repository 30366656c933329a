import type { Database } from "bun:sqlite";
import { timingSafeEqual } from "node:crypto";
import type { AccountService } from "../accounts/service";
import { ApiError } from "../api/http/errors";
import type { Clock } from "../clock";
import { randomBase62 } from "../ids";
import { sessionsRepo } from "../store/sessions";

// Console sign-in: account passwords hashed with argon2id (Bun.password), sessions in the store
// keyed by the SHA-256 of the cookie value, a CSRF token per session, and sign-in attempts limited
// per account and per client address. API keys never sign in here: only an account's password.

export const SESSION_COOKIE = "appliance_session";
/** A session lasts at most this long, and ends sooner after this much idle time. */
export const SESSION_MAX_MS = 7 * 86_400_000;
export const SESSION_IDLE_MS = 24 * 3_600_000;
/** Failed sign-ins allowed per account, and from one address, in a window before 429. */
export const SIGNIN_FAILURES = 5;
export const SIGNIN_FAILURES_PER_ADDRESS = 20;
export const SIGNIN_WINDOW_MS = 15 * 60_000;
export const MIN_PASSWORD = 8;

export interface ConsoleSession {
  accountId: string;
  account: string;
  role: "user" | "admin";
  csrf: string;
}

const sha256 = (s: string) => new Uint8Array(new Bun.CryptoHasher("sha256").update(s).digest());

export type ConsoleAuth = ReturnType<typeof createConsoleAuth>;

export function createConsoleAuth(o: { db: Database; clock: Clock; accounts: AccountService }) {
  const repo = sessionsRepo(o.db);
  const failures = new Map<string, number[]>();
  // Verified against when the account does not exist, so a wrong name costs as long as a wrong password.
  let decoy: string | null = null;
  const decoyHash = async () => (decoy ??= await Bun.password.hash(randomBase62(24), { algorithm: "argon2id" }));

  function recent(key: string, now: number): number[] {
    const list = (failures.get(key) ?? []).filter((t) => now - t < SIGNIN_WINDOW_MS);
    if (list.length) failures.set(key, list);
    else failures.delete(key);
    return list;
  }

  function throttle(keys: string[], now: number) {
    for (const key of keys) {
      const list = recent(key, now);
      if (list.length >= (key.startsWith("address:") ? SIGNIN_FAILURES_PER_ADDRESS : SIGNIN_FAILURES)) {
        const retry = Math.ceil((list[0]! + SIGNIN_WINDOW_MS - now) / 1000);
        throw new ApiError("rate_limit_exceeded", `too many failed sign-ins; try again in ${Math.ceil(retry / 60)} minute(s)`, {
          headers: { "retry-after": String(retry) },
        });
      }
    }
  }

  function checkPassword(password: unknown): string {
    if (typeof password !== "string" || password.length < MIN_PASSWORD || password.length > 1024)
      throw new ApiError("invalid_request", `a password is ${MIN_PASSWORD}–1024 characters`, { param: "password" });
    return password;
  }

  return {
    /** Sets (or replaces) an account's console password; its sessions end. */
    async setPassword(accountRef: string, password: unknown): Promise<void> {
      const account = o.accounts.getAccount(accountRef);
      const hash = await Bun.password.hash(checkPassword(password), { algorithm: "argon2id" });
      o.db.transaction(() => {
        repo.setPasswordHash(account.id, hash);
        repo.removeAccount(account.id);
      }).immediate();
    },

    hasPassword: (accountId: string) => repo.passwordHash(accountId) !== null,

    /** Checks the password; returns the new session's cookie value and its view. */
    async signIn(name: unknown, password: unknown, address: string): Promise<{ token: string; session: ConsoleSession }> {
      const now = o.clock.now();
      if (typeof name !== "string" || name === "" || name.length > 64) throw new ApiError("invalid_request", "account is required", { param: "account" });
      if (typeof password !== "string" || password === "" || password.length > 1024) throw new ApiError("invalid_request", "password is required", { param: "password" });
      const keys = [`account:${name.toLowerCase()}`, `address:${address}`];
      throttle(keys, now);
      const decoy = await decoyHash(); // made once, before any verify, so no sign-in pays for it
      let account: ReturnType<AccountService["getAccount"]> | null = null;
      try {
        account = o.accounts.getAccount(name);
      } catch {}
      const hash = account ? repo.passwordHash(account.id) : null;
      const ok = await Bun.password.verify(password, hash ?? decoy).catch(() => false);
      if (!account || !hash || !ok) {
        for (const key of keys) failures.set(key, [...recent(key, now), now]);
        throw new ApiError("invalid_credentials", "wrong account or password");
      }
      failures.delete(keys[0]!);
      const token = randomBase62(43);
      const csrf = randomBase62(32);
      repo.sweep(now, now - SESSION_IDLE_MS);
      repo.insert({ id_hash: sha256(token), account_id: account.id, csrf, created_at: now, expires_at: now + SESSION_MAX_MS });
      return { token, session: { accountId: account.id, account: account.name, role: account.role, csrf } };
    },

    /** The session of a cookie value, or null (unknown, expired or idle too long). */
    session(token: string | null): ConsoleSession | null {
      if (!token || token.length > 128) return null;
      const hash = sha256(token);
      const row = repo.byHash(hash);
      const now = o.clock.now();
      if (!row || row.expires_at <= now || now - row.last_seen_at >= SESSION_IDLE_MS) return null;
      const account = o.accounts.getAccount(row.account_id);
      if (now - row.last_seen_at > 60_000) repo.touch(hash, now);
      return { accountId: account.id, account: account.name, role: account.role, csrf: row.csrf };
    },

    signOut(token: string | null): void {
      if (token) repo.remove(sha256(token));
    },

    /** Whether `given` is the session's CSRF token (constant time). */
    csrfMatches(session: ConsoleSession, given: string | null): boolean {
      if (!given) return false;
      const a = Buffer.from(session.csrf);
      const b = Buffer.from(given);
      return a.length === b.length && timingSafeEqual(a, b);
    },
  };
}
