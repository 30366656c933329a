import { isIPv4, isIPv6 } from "node:net";
import { ApiError } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import { memoryBuckets, type Bucket, type BucketStore } from "../../4-store/signin-buckets";

// Console sign-in throttling. Every attempt takes ONE decision before its password is verified:
// its buckets are checked and charged a failure in one step (atomic across processes), so attempts running
// at once see each other's charges while their (slow, async) argon2 verifies run; a success
// refunds its charge. An attempt goes one of three ways:
//   - a browser holding a device token for the account (it signed in to it before): its own
//     budget of DEVICE_FAILURES, nothing else — an attacker elsewhere cannot delay it;
//   - from the host itself (a loopback address, with no proxy's forwarding headers): a budget per
//     account of its own, never the account's back-off — nothing outside the machine can lock the
//     owner out there, and a new password starts that budget afresh;
//   - through a proxy on the host whose clients cannot be told apart (a loopback client that
//     carries forwarding headers: the proxy is not in server.trusted_proxies, issue 41 L4): the
//     account's back-off alone. Not the host's budget, which every stranger behind that proxy
//     would share and spend (the owner at the host locked out); not one address budget either,
//     which one stranger would spend for all of them (every account locked for everyone there).
//     Listing the proxy in server.trusted_proxies gives each client its own address budget;
//   - anyone else: the address budget (the attacker's cost per address) and the account's
//     back-off, which delays guesses from every address together.
// The client address is the one the edge resolved (api/http/context.ts: the peer, or the client a
// trusted proxy names). A proxy on the host that sends no forwarding header cannot be told from the
// host: configure it to send X-Forwarded-For.
// The buckets live where the store keeps them (src/4-store/signin-buckets.ts): in this process's
// memory with SQLite (a restart clears them), in the database with PostgreSQL (every process shares
// one budget). A new password (CLI `appliance accounts password`) starts a new account bucket (see auth.ts).

/** Failures in a row an account takes from other machines before each next attempt waits. */
export const SIGNIN_FREE_FAILURES = 5;
/** The wait after the fifth failure in a row; it doubles with each further one, up to the cap. */
export const SIGNIN_BACKOFF_BASE_MS = 1000;
export const SIGNIN_BACKOFF_MAX_MS = 15 * 60_000;
/** An account's run of failures is forgotten after this long without one. */
export const SIGNIN_FORGET_MS = 24 * 3_600_000;
/** Failures one client address (an IPv6 /64) may have in a window; from the host, per account. */
export const SIGNIN_FAILURES_PER_ADDRESS = 20;
export const SIGNIN_ADDRESS_WINDOW_MS = 15 * 60_000;
/** Failures a device token may have before it stops counting as a known browser. */
export const SIGNIN_DEVICE_FAILURES = 5;

export interface SigninAttempt {
  /** The account's bucket key (its id and password version, or the unknown name). */
  account: string;
  /** The client address as the edge resolved it ("local" when served without a socket). */
  address: string;
  /** The request carries a proxy's forwarding headers (X-Forwarded-For, Forwarded, Via, …). */
  forwarded?: boolean;
  /** The id of a valid device token for this account, or null. */
  device: string | null;
}

export type SigninPath = "device" | "host" | "proxied" | "remote";

/** What one attempt was charged; handed back on success. */
export interface Reservation {
  path: SigninPath;
  keys: string[];
}

export type SigninThrottle = ReturnType<typeof createSigninThrottle>;

/** Whether a bucket has nothing left to count: an address window over, or an account's run forgotten. */
export function staleBucket(key: string, b: Bucket, now: number): boolean {
  if (windowed(key)) return now - b.since >= SIGNIN_ADDRESS_WINDOW_MS;
  return now - b.last >= SIGNIN_FORGET_MS && b.nextAt <= now;
}

/** `buckets`: where the buckets live (default: this process's memory, for the SQLite store). */
export function createSigninThrottle(clock: Clock, buckets: BucketStore = memoryBuckets((key, b) => staleBucket(key, b, clock.now()), () => clock.now())) {
  function refuse(waitMs: number): never {
    const seconds = Math.max(1, Math.ceil(waitMs / 1000));
    const when = seconds < 120 ? `${seconds} second(s)` : `${Math.ceil(seconds / 60)} minute(s)`;
    throw new ApiError("rate_limit_exceeded", `too many failed sign-ins; try again in ${when}`, {
      headers: { "retry-after": String(seconds) },
    });
  }

  return {
    /**
     * Decides one attempt and charges it as a failure in one step (no other decision on its buckets
     * comes between the check and the charge, in any process): rejects with 429 and Retry-After
     * when a bucket refuses.
     */
    async reserve(a: SigninAttempt): Promise<Reservation> {
      const now = clock.now();
      const client = clientAddress(a.address);
      const account = `account:${a.account}`;
      const address = client.loopback ? `host:${a.account}` : `address:${client.key}`;
      const device = a.device !== null ? `device:${a.device}` : null;
      return buckets.atomically([account, address, ...(device ? [device] : [])], (view) => {
        const live = (key: string): Bucket | undefined => {
          const b = view.get(key);
          if (b && staleBucket(key, b, now)) {
            view.delete(key);
            return undefined;
          }
          return b;
        };
        const charge = (key: string): Bucket => {
          const b = live(key) ?? { failures: 0, since: now, last: now, nextAt: now };
          b.failures++;
          b.last = now;
          view.set(key, b);
          return b;
        };
        if (device && (live(device)?.failures ?? 0) < SIGNIN_DEVICE_FAILURES) {
          charge(device);
          return { path: "device" as const, keys: [device] };
        }
        const backoff = () => {
          const cb = live(account);
          if (cb && cb.nextAt > now) refuse(cb.nextAt - now);
        };
        const chargeAccount = () => {
          const b = charge(account);
          b.nextAt = now + backoffAfter(b.failures);
          view.set(account, b);
        };
        if (client.loopback && a.forwarded) {
          backoff();
          chargeAccount();
          return { path: "proxied" as const, keys: [account] };
        }
        const ab = live(address);
        if (ab && ab.failures >= SIGNIN_FAILURES_PER_ADDRESS) refuse(ab.since + SIGNIN_ADDRESS_WINDOW_MS - now);
        if (client.loopback) {
          charge(address);
          return { path: "host" as const, keys: [address] };
        }
        backoff();
        charge(address);
        chargeAccount();
        return { path: "remote" as const, keys: [address, account] };
      });
    },

    /** The password was right: the attempt's charges are refunded and the account's run ends. */
    async succeeded(r: Reservation): Promise<void> {
      await buckets.atomically(r.keys, (view) => {
        for (const key of r.keys) {
          const b = view.get(key);
          if (!b) continue;
          if (windowed(key) && b.failures > 1) view.set(key, { ...b, failures: b.failures - 1 });
          else view.delete(key);
        }
      });
    },
  };
}

/** Address budgets (and the host's per-account one) count failures in a fixed window. */
const windowed = (key: string) => key.startsWith("address:") || key.startsWith("host:");

/** The wait before the next attempt after `failures` in a row. */
export function backoffAfter(failures: number): number {
  if (failures < SIGNIN_FREE_FAILURES) return 0;
  return Math.min(SIGNIN_BACKOFF_MAX_MS, SIGNIN_BACKOFF_BASE_MS * 2 ** Math.min(failures - SIGNIN_FREE_FAILURES, 30));
}

/**
 * A client address as a throttle key: IPv4-mapped IPv6 as the IPv4 address, other IPv6 by its /64
 * (one subscriber's whole prefix counts as one client), and whether it is the host itself.
 */
export function clientAddress(address: string): { key: string; loopback: boolean } {
  // Requests served without a socket come from this very process (tests, in-process callers).
  if (address === "local") return { key: "local", loopback: true };
  let a = address.toLowerCase();
  const zone = a.indexOf("%");
  if (zone >= 0) a = a.slice(0, zone);
  if (isIPv4(a)) return { key: a, loopback: a.startsWith("127.") };
  if (!isIPv6(a)) return { key: a, loopback: false };
  const groups = ipv6Groups(a);
  const mapped = groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff;
  if (mapped) return clientAddress(`${groups[6]! >> 8}.${groups[6]! & 255}.${groups[7]! >> 8}.${groups[7]! & 255}`);
  const loopback = groups.slice(0, 7).every((g) => g === 0) && groups[7] === 1;
  return { key: loopback ? "::1" : `${groups.slice(0, 4).map((g) => g.toString(16)).join(":")}::/64`, loopback };
}

/** The eight 16-bit groups of a valid IPv6 address (a trailing dotted IPv4 part included). */
function ipv6Groups(a: string): number[] {
  let text = a;
  const dotted = text.match(/(\d+)\.(\d+)\.(\d+)\.(\d+)$/);
  if (dotted) {
    const [b0, b1, b2, b3] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((b0 << 8) | b1).toString(16)}:${((b2 << 8) | b3).toString(16)}`;
  }
  const [head, tail] = text.includes("::") ? text.split("::") : [text, undefined];
  const parse = (s: string | undefined) => (s ? s.split(":").map((g) => parseInt(g, 16)) : []);
  const h = parse(head);
  const t = parse(tail);
  return tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill(0), ...t];
}
