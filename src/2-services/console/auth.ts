import { timingSafeEqual } from "node:crypto";
import type { AccountService } from "../accounts/service";
import { ApiError } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import { randomBase62 } from "../../lib/ids";
import type { SessionStore } from "../../4-store/sessions";
import type { BucketStore } from "../../4-store/signin-buckets";
import { deviceTokenId, mintDeviceToken } from "./devices";
import { hostAllowList, type HostAllowList } from "./hosts";
import { createSigninThrottle } from "./throttle";

// Console sign-in: account passwords hashed with argon2id (Bun.password), sessions in the store
// keyed by the SHA-256 of the cookie value, a CSRF token per session, and sign-in attempts limited
// per client address, per account with back-off, and per known browser (throttle.ts, devices.ts).
// API keys never sign in here: only an account's password.

export const SESSION_COOKIE = "appliance_session";
/** A session lasts at most this long, and ends sooner after this much idle time. */
export const SESSION_MAX_MS = 7 * 86_400_000;
export const SESSION_IDLE_MS = 24 * 3_600_000;
export const MIN_PASSWORD = 8;

export interface ConsoleSession {
  accountId: string;
  account: string;
  role: "user" | "admin";
  csrf: string;
}

const sha256 = (s: string) => new Uint8Array(new Bun.CryptoHasher("sha256").update(s).digest());
const sha256hex = (s: string) => new Bun.CryptoHasher("sha256").update(s).digest("hex");

export type ConsoleAuth = ReturnType<typeof createConsoleAuth>;

export function createConsoleAuth(o: {
  sessions: SessionStore;
  clock: Clock;
  /** Where the sign-in throttle's buckets live: the store's, shared by every process (PostgreSQL), or this process's memory (default). */
  buckets?: BucketStore;
  accounts: AccountService;
  /** Names the console answers to besides the built-in ones (hosts.ts). */
  allowedHosts?: string[];
  /** The password check; tests count its calls. */
  verify?: (password: string, hash: string) => Promise<boolean>;
}) {
  const repo = o.sessions;
  const throttle = o.buckets ? createSigninThrottle(o.clock, o.buckets) : createSigninThrottle(o.clock);
  const verify = o.verify ?? ((password: string, hash: string) => Bun.password.verify(password, hash));
  const allowsHost: HostAllowList = hostAllowList(o.allowedHosts ?? []);
  // Verified against when the account does not exist, so a wrong name costs as long as a wrong password.
  let decoy: string | null = null;
  const decoyHash = async () => (decoy ??= await Bun.password.hash(randomBase62(24), { algorithm: "argon2id" }));

  function checkPassword(password: unknown): string {
    if (typeof password !== "string" || password.length < MIN_PASSWORD || password.length > 1024)
      throw new ApiError("invalid_request", `a password is ${MIN_PASSWORD}–1024 characters`, { param: "password" });
    return password;
  }

  return {
    /**
     * Sets (or replaces) an account's console password: its sessions end, its device tokens stop
     * counting and its sign-in back-off starts over (both follow the password hash).
     */
    async setPassword(accountRef: string, password: unknown): Promise<void> {
      const account = await o.accounts.getAccount(accountRef);
      const hash = await Bun.password.hash(checkPassword(password), { algorithm: "argon2id" });
      await repo.setPassword(account.id, hash);
    },

    hasPassword: async (accountId: string) => (await repo.passwordHash(accountId)) !== null,

    /**
     * Checks the password; returns the new session's cookie value, its view and a device token for
     * the browser. `device` is the device token the browser sent, if any.
     */
    async signIn(
      name: unknown,
      password: unknown,
      from: { address: string; forwarded?: boolean },
      device: string | null = null,
    ): Promise<{ token: string; session: ConsoleSession; device: string }> {
      if (typeof name !== "string" || name === "" || name.length > 64) throw new ApiError("invalid_request", "account is required", { param: "account" });
      if (typeof password !== "string" || password === "" || password.length > 1024) throw new ApiError("invalid_request", "password is required", { param: "password" });
      let account: Awaited<ReturnType<AccountService["getAccount"]>> | null = null;
      try {
        account = await o.accounts.getAccount(name);
      } catch {}
      const hash = account ? await repo.passwordHash(account.id) : null;
      const now = o.clock.now();
      // One decision, charged as a failure, before the password is verified (throttle.ts). The account
      // is keyed by its id (a name and an id share one bucket) and its password version, so a new
      // password starts a new bucket even when another process (the CLI) sets it.
      const reservation = await throttle.reserve({
        account: account ? `${account.id}:${hash ? sha256hex(hash).slice(0, 16) : "none"}` : `?${name.toLowerCase()}`,
        address: from.address,
        forwarded: from.forwarded ?? false,
        device: account && hash ? deviceTokenId(device, account.id, hash, now) : null,
      });
      const decoy = await decoyHash();
      const ok = await verify(password, hash ?? decoy).catch(() => false);
      if (!account || !hash || !ok) throw new ApiError("invalid_credentials", "wrong account or password");
      await throttle.succeeded(reservation);
      const token = randomBase62(43);
      const csrf = randomBase62(32);
      const at = o.clock.now();
      await repo.open({ id_hash: sha256(token), account_id: account.id, csrf, created_at: at, expires_at: at + SESSION_MAX_MS }, { now: at, idleBefore: at - SESSION_IDLE_MS });
      return {
        token,
        session: { accountId: account.id, account: account.name, role: account.role, csrf },
        device: mintDeviceToken(account.id, hash, at),
      };
    },

    /** Whether the console answers to this Host header (DNS-rebinding guard, hosts.ts). */
    allowsHost,

    /** The session of a cookie value, or null (unknown, expired or idle too long). */
    async session(token: string | null): Promise<ConsoleSession | null> {
      if (!token || token.length > 128) return null;
      const hash = sha256(token);
      const row = await repo.byHash(hash);
      const now = o.clock.now();
      if (!row || row.expires_at <= now || now - row.last_seen_at >= SESSION_IDLE_MS) return null;
      const account = await o.accounts.getAccount(row.account_id);
      if (now - row.last_seen_at > 60_000) await repo.touch(hash, now);
      return { accountId: account.id, account: account.name, role: account.role, csrf: row.csrf };
    },

    async signOut(token: string | null): Promise<void> {
      if (token) await repo.remove(sha256(token));
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
