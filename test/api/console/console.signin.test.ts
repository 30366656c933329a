import { sessionStoreOf } from "../../../src/4-store/store";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { ManualClock } from "../../../src/lib/clock";
import { createConsoleAuth } from "../../../src/2-services/console/auth";
import { SIGNIN_DEVICE_FAILURES, SIGNIN_FAILURES_PER_ADDRESS, SIGNIN_FREE_FAILURES } from "../../../src/2-services/console/throttle";
import { testApp, type TestApp } from "../../helpers/app";
import { CLI } from "../../helpers/cli";
import { consoleAccount, consoleClient } from "./client";

// Sign-in throttling through the app: one decision per attempt before its password is verified
// (concurrent guesses see each other), a back-off per account that slows guesses from every
// address, and an owner who still signs in — from the host, from a browser that signed in before,
// after the wait, or after a new password set with the CLI. Password checks are counted (and held
// when a test needs them in flight) through the injected verify; the clock is moved by hand.

const clock = new ManualClock(Date.UTC(2026, 10, 1));
let verifies = 0;
let hold: Promise<void> | null = null;
let t: TestApp;
beforeAll(() => {
  t = testApp({
    clock,
    override: (d) => ({
      console: {
        views: d.console.views,
        conversations: d.console.conversations,
        pulls: d.console.pulls,
        auth: createConsoleAuth({
          sessions: sessionStoreOf(d.store),
          clock,
          accounts: d.accounts,
          verify: async (password, hash) => {
            verifies++;
            if (hold) await hold;
            return Bun.password.verify(password, hash);
          },
        }),
      },
    }),
  });
});
afterAll(() => t.close());

const code = async (res: Response) => ((await res.json()) as any).error.code;
let nextAddress = 0;
/** A client on a machine of its own (a documentation-range address, never loopback). */
const remote = () => consoleClient(t, { address: `198.51.${Math.floor(++nextAddress / 250)}.${nextAddress % 250}` });

/** Holds every password check until the returned function is called. */
function holdVerifies(): () => void {
  let release!: () => void;
  hold = new Promise((r) => (release = r));
  return () => {
    hold = null;
    release();
  };
}

/** Waits (yielding, not timing) until `done` holds. */
async function until(done: () => boolean) {
  while (!done()) await Bun.sleep(1);
}

test("60 concurrent wrong guesses from 60 addresses: only the free failures are verified, and the right password sent meanwhile is refused", async () => {
  const pw = await consoleAccount(t, "race-a");
  const release = holdVerifies();
  verifies = 0;
  let answered = 0;
  const guesses = Array.from({ length: 60 }, () =>
    remote()
      .signIn("race-a", "wrong-password")
      .then((r) => (answered++, r)),
  );
  try {
    await until(() => verifies + answered === 60); // every attempt decided: verifying, or answered
    expect(verifies).toBe(SIGNIN_FREE_FAILURES);
    // The verifies of the first five are still running: the right password is not checked at all.
    const right = await remote().signIn("race-a", pw);
    expect(right.status).toBe(429);
    expect(right.headers.get("set-cookie")).toBeNull();
  } finally {
    release();
  }
  const statuses = (await Promise.all(guesses)).map((r) => r.status);
  expect(statuses.filter((s) => s === 401)).toHaveLength(SIGNIN_FREE_FAILURES);
  expect(statuses.filter((s) => s === 429)).toHaveLength(60 - SIGNIN_FREE_FAILURES);
  expect(verifies).toBe(SIGNIN_FREE_FAILURES);
});

test("60 concurrent wrong guesses from the host: its budget is verified, no more, and then the right password waits too", async () => {
  const pw = await consoleAccount(t, "race-host");
  verifies = 0;
  const host = consoleClient(t); // no socket: "local", the host itself
  const statuses = (await Promise.all(Array.from({ length: 60 }, () => host.signIn("race-host", "wrong-password")))).map((r) => r.status);
  expect(verifies).toBe(SIGNIN_FAILURES_PER_ADDRESS);
  expect(statuses.filter((s) => s === 401)).toHaveLength(SIGNIN_FAILURES_PER_ADDRESS);
  expect((await host.signIn("race-host", pw)).status).toBe(429);
  expect(verifies).toBe(SIGNIN_FAILURES_PER_ADDRESS);
});

test("five wrong passwords from an attacker delay the owner by a second, not fifteen minutes", async () => {
  const pw = await consoleAccount(t, "five-a");
  const attacker = remote();
  for (let i = 0; i < 5; i++) expect(await code(await attacker.signIn("five-a", "wrong-password"))).toBe("invalid_credentials");
  const owner = remote();
  const wait = await owner.signIn("five-a", pw);
  expect(wait.status).toBe(429);
  expect(wait.headers.get("retry-after")).toBe("1");
  clock.advance(1000);
  expect((await owner.signIn("five-a", pw)).status).toBe(200);
});

test("while an attacker keeps the account in back-off, the owner signs in from the host and from a browser that signed in before", async () => {
  const pw = await consoleAccount(t, "owner-a");
  const browser = remote();
  expect((await browser.signIn("owner-a", pw)).status).toBe(200);
  expect(browser.device).toStartWith("appliance_device=");
  // The attacker guesses from many addresses until the account's back-off refuses it.
  for (let i = 0; i < 12; i++) await remote().signIn("owner-a", "wrong-password");
  expect((await remote().signIn("owner-a", pw)).status).toBe(429); // an unknown browser waits
  expect((await consoleClient(t).signIn("owner-a", pw)).status).toBe(200); // the host does not
  expect((await browser.signIn("owner-a", pw)).status).toBe(200); // nor the known browser
  // Its device token does not count for another account, nor does a made-up one for this account.
  const pwB = await consoleAccount(t, "owner-b");
  for (let i = 0; i < 12; i++) await remote().signIn("owner-b", "wrong-password");
  const other = remote();
  other.device = browser.device;
  expect((await other.signIn("owner-b", pwB)).status).toBe(429);
  other.device = `appliance_device=${"A".repeat(22)}.${clock.now().toString(36)}.${"A".repeat(43)}`;
  expect((await other.signIn("owner-a", pw)).status).toBe(429);
});

test("a known browser has its own few guesses; then it waits like any other", async () => {
  const pw = await consoleAccount(t, "device-a");
  const browser = remote();
  expect((await browser.signIn("device-a", pw)).status).toBe(200);
  for (let i = 0; i < 20; i++) await remote().signIn("device-a", "wrong-password"); // back-off running
  verifies = 0;
  for (let i = 0; i < SIGNIN_DEVICE_FAILURES; i++) expect((await browser.signIn("device-a", "wrong-password")).status).toBe(401);
  expect((await browser.signIn("device-a", pw)).status).toBe(429);
  expect(verifies).toBe(SIGNIN_DEVICE_FAILURES);
});

test("a new password set with the CLI ends the back-off and the host's wait at once", async () => {
  const pw = await consoleAccount(t, "reset-a");
  for (let i = 0; i < 12; i++) await remote().signIn("reset-a", "wrong-password");
  const host = consoleClient(t);
  for (let i = 0; i < SIGNIN_FAILURES_PER_ADDRESS; i++) await host.signIn("reset-a", "wrong-password");
  expect((await remote().signIn("reset-a", pw)).status).toBe(429);
  expect((await host.signIn("reset-a", pw)).status).toBe(429);
  // `appliance accounts password reset-a` in another process, on this server's data dir.
  const r = Bun.spawnSync([process.execPath, CLI, "accounts", "password", "reset-a"], {
    env: { PATH: process.env.PATH ?? "", HOME: t.dir, XDG_CONFIG_HOME: join(t.dir, "no-config"), APPLIANCE_DATA_DIR: t.dir },
    stdin: new TextEncoder().encode("a-brand-new-password\n"),
    stdout: "pipe",
    stderr: "pipe",
  });
  expect({ code: r.exitCode, stderr: r.stderr.toString(), stdout: r.stdout.toString() }).toEqual({ code: 0, stderr: "console password set for reset-a\n", stdout: "" });
  expect((await host.signIn("reset-a", "a-brand-new-password")).status).toBe(200);
  expect((await remote().signIn("reset-a", "a-brand-new-password")).status).toBe(200);
}, 60_000); // a CLI process starts

test("wrong passwords are refused alike for unknown accounts, and an account's id shares its name's back-off", async () => {
  const pw = await consoleAccount(t, "alike-a");
  const c = remote();
  const unknown = await c.signIn("nobody-here", "whatever-123");
  const wrong = await c.signIn("alike-a", "wrong-password");
  expect([unknown.status, wrong.status]).toEqual([401, 401]);
  expect(((await unknown.json()) as any).error.message).toBe(((await wrong.json()) as any).error.message);
  const id = (await t.deps.accounts.getAccount("alike-a")).id;
  for (let i = 1; i < SIGNIN_FREE_FAILURES; i++) await remote().signIn(i % 2 ? id : "alike-a", "wrong-password");
  expect((await remote().signIn(id, pw)).status).toBe(429);
  expect((await remote().signIn("alike-a", pw)).status).toBe(429);
});
