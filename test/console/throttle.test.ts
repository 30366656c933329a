import { expect, test } from "bun:test";
import { ApiError } from "../../src/1-api/http/errors";
import { ManualClock } from "../../src/lib/clock";
import {
  backoffAfter,
  clientAddress,
  createSigninThrottle,
  SIGNIN_ADDRESS_WINDOW_MS,
  SIGNIN_BACKOFF_MAX_MS,
  SIGNIN_DEVICE_FAILURES,
  SIGNIN_FAILURES_PER_ADDRESS,
  SIGNIN_FORGET_MS,
  SIGNIN_FREE_FAILURES,
  type SigninAttempt,
} from "../../src/2-services/console/throttle";

// The sign-in limiter on its own: one decision per attempt, charged before the verify.

const remote = (address: string, account = "acct:v1"): SigninAttempt => ({ account, address, device: null });

/** The Retry-After of a refused attempt, or null when it was let through. */
async function retryAfter(fn: () => Promise<unknown>): Promise<number | null> {
  try {
    await fn();
    return null;
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    expect((e as ApiError).code).toBe("rate_limit_exceeded");
    return Number((e as ApiError).headers["retry-after"]);
  }
}

test("client addresses: IPv4-mapped IPv6 is its IPv4 address, IPv6 counts by /64, loopback in every form", async () => {
  const table: [string, string, boolean][] = [
    ["local", "local", true],
    ["127.0.0.1", "127.0.0.1", true],
    ["127.9.8.7", "127.9.8.7", true],
    ["::1", "::1", true],
    ["0:0:0:0:0:0:0:1", "::1", true],
    ["::ffff:127.0.0.1", "127.0.0.1", true],
    ["::ffff:7f00:1", "127.0.0.1", true],
    ["0:0:0:0:0:ffff:127.0.0.1", "127.0.0.1", true],
    ["::ffff:203.0.113.9", "203.0.113.9", false],
    ["203.0.113.9", "203.0.113.9", false],
    ["2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64", false],
    ["2001:DB8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64", false],
    ["fe80::1%eth0", "fe80:0:0:0::/64", false],
    ["::", "0:0:0:0::/64", false],
  ];
  for (const [address, key, loopback] of table) expect({ address, ...clientAddress(address) }).toEqual({ address, key, loopback });
});

test("the account's back-off starts after the free failures, doubles, and is capped", async () => {
  expect([1, 4, 5, 6, 7, 10].map(backoffAfter)).toEqual([0, 0, 1000, 2000, 4000, 32_000]);
  expect(backoffAfter(SIGNIN_FREE_FAILURES + 40)).toBe(SIGNIN_BACKOFF_MAX_MS);
});

test("attempts are charged when decided: the free failures pass at once, the next waits, from any address", async () => {
  const clock = new ManualClock();
  const th = createSigninThrottle(clock);
  for (let i = 0; i < SIGNIN_FREE_FAILURES; i++) expect(await retryAfter(() => th.reserve(remote(`198.51.100.${i}`)))).toBeNull();
  expect(await retryAfter(() => th.reserve(remote("198.51.100.200")))).toBe(1);
  clock.advance(1000);
  await th.reserve(remote("198.51.100.201"));
  expect(await retryAfter(() => th.reserve(remote("198.51.100.202")))).toBe(2);
  // Another account is not delayed.
  expect(await retryAfter(() => th.reserve(remote("198.51.100.200", "other:v1")))).toBeNull();
});

test("a success refunds its charge and ends the account's run; a quiet day forgets it", async () => {
  const clock = new ManualClock();
  const th = createSigninThrottle(clock);
  for (let i = 0; i < SIGNIN_FREE_FAILURES - 1; i++) await th.reserve(remote("198.51.100.1"));
  await th.succeeded(await th.reserve(remote("198.51.100.1")));
  for (let i = 0; i < SIGNIN_FREE_FAILURES; i++) expect(await retryAfter(() => th.reserve(remote("198.51.100.1")))).toBeNull();
  expect(await retryAfter(() => th.reserve(remote("198.51.100.1")))).toBe(1);
  clock.advance(SIGNIN_FORGET_MS);
  for (let i = 0; i < SIGNIN_FREE_FAILURES; i++) expect(await retryAfter(() => th.reserve(remote("198.51.100.1")))).toBeNull();
});

test("one address has a budget across accounts; its /64 counts as one address", async () => {
  const clock = new ManualClock();
  const th = createSigninThrottle(clock);
  for (let i = 0; i < SIGNIN_FAILURES_PER_ADDRESS; i++) await th.reserve(remote(`2001:db8:0:1::${i + 1}`, `?name${i}`));
  const wait = await retryAfter(() => th.reserve(remote("2001:db8:0:1:ffff::9", "?another")));
  expect(wait).toBe(SIGNIN_ADDRESS_WINDOW_MS / 1000);
  expect(await retryAfter(() => th.reserve(remote("2001:db8:0:2::1", "?another")))).toBeNull();
  clock.advance(SIGNIN_ADDRESS_WINDOW_MS);
  expect(await retryAfter(() => th.reserve(remote("2001:db8:0:1::1", "?another")))).toBeNull();
});

test("from the host the account's back-off does not apply; the host has a budget per account", async () => {
  const clock = new ManualClock();
  const th = createSigninThrottle(clock);
  for (let i = 0; i < 30; i++) await retryAfter(() => th.reserve(remote(`198.51.100.${i}`)));
  expect(await retryAfter(() => th.reserve(remote("198.51.100.99")))).toBeGreaterThan(0);
  for (let i = 0; i < SIGNIN_FAILURES_PER_ADDRESS; i++) expect(await retryAfter(() => th.reserve(remote("::1")))).toBeNull();
  expect(await retryAfter(() => th.reserve(remote("127.0.0.1")))).toBe(SIGNIN_ADDRESS_WINDOW_MS / 1000);
  // A new password is a new account key: the host's budget starts afresh.
  expect(await retryAfter(() => th.reserve(remote("127.0.0.1", "acct:v2")))).toBeNull();
});

test("a known device skips the account's back-off and the address budget, until its own failures run out", async () => {
  const clock = new ManualClock();
  const th = createSigninThrottle(clock);
  for (let i = 0; i < 30; i++) await retryAfter(() => th.reserve(remote("198.51.100.7")));
  const device: SigninAttempt = { account: "acct:v1", address: "198.51.100.7", device: "dev1" };
  for (let i = 0; i < SIGNIN_DEVICE_FAILURES; i++) expect((await th.reserve(device)).path).toBe("device");
  expect(await retryAfter(() => th.reserve(device))).toBeGreaterThan(0); // now an unknown browser again
  const fresh = await th.reserve({ ...device, device: "dev2", address: "203.0.113.1" });
  expect(fresh.path).toBe("device");
  await th.succeeded(fresh);
  expect((await th.reserve({ ...device, device: "dev2" })).path).toBe("device");
});
