import { afterAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { createAccountService, type AccountService } from "../../src/2-services/accounts/service";
import { systemClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { openStore } from "../../src/4-store/db";
import { accountStoreOf, openPostgresStore, sqliteStore, type Store } from "../../src/4-store/store";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: a key revoked, rotated or narrowed through one connection is refused by every other
// within 1 s — on PostgreSQL by the key_changes notification, or by the version poll when a
// notification is missed; on SQLite by PRAGMA data_version. Two services on two connections stand
// for two processes (the three-process appliance test does it with real processes).

const limits = validateConfig({}).limits;
const stores: Store[] = [];
const services: AccountService[] = [];
const dirs: string[] = [];
afterAll(async () => {
  services.forEach((s) => s.close());
  for (const s of stores) await s.close();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

async function twoProcesses(backend: "sqlite" | "postgres"): Promise<[AccountService, AccountService, Store]> {
  let pair: Store[];
  if (backend === "sqlite") {
    const dir = tempDir();
    dirs.push(dir);
    pair = [sqliteStore(openStore(dir)), sqliteStore(openStore(dir))];
  } else {
    const url = await freshDatabase("revocation");
    pair = [await openPostgresStore(url), await openPostgresStore(url)];
  }
  stores.push(...pair);
  const [a, b] = pair.map((s) => createAccountService(accountStoreOf(s), limits, systemClock));
  services.push(a!, b!);
  return [a!, b!, pair[0]!];
}

/** How long until `cond` holds, polling every 10 ms; fails past `limitMs`. */
async function within(limitMs: number, cond: () => Promise<boolean>): Promise<number> {
  const t0 = performance.now();
  while (!(await cond())) {
    if (performance.now() - t0 > limitMs) throw new Error(`not within ${limitMs} ms`);
    await Bun.sleep(10);
  }
  return performance.now() - t0;
}

for (const backend of ["sqlite", "postgres"] as const) {
  describe(`on ${backend}`, () => {
    test("a key revoked in one process is refused by the other within 1 s, though it was cached there", async () => {
      const [a, b] = await twoProcesses(backend);
      await b.createAccount("team", { creditMicros: 1_000_000 });
      const { key, info } = await b.createKey({ account: "team", kind: "premium" });
      expect(await a.authenticate(key)).not.toBeNull();
      expect(await a.authenticate(key)).not.toBeNull(); // now from a's cache
      await b.revokeKey(info.id);
      await within(1000, async () => (await a.authenticate(key)) === null);
    });

    test("a rotation and a narrowed scope reach the other process within 1 s", async () => {
      const [a, b] = await twoProcesses(backend);
      await b.createAccount("lab");
      const { key, info } = await b.createKey({ account: "lab", kind: "premium", scopes: ["inference", "rental"] });
      expect((await a.authenticate(key))!.scopes).toEqual(["inference", "rental"]);
      await b.setScope(info.id, "rental", false);
      await within(1000, async () => (await a.authenticate(key))?.scopes.length === 1);
      const rotated = await b.rotateKey(info.id);
      await within(1000, async () => (await a.authenticate(key)) === null);
      expect((await a.authenticate(rotated.key))!.keyId).toBe(rotated.info.id);
    });
  });
}

describe("on postgres", () => {
  test("a missed notification is made up by the version poll", async () => {
    const [, , store] = await twoProcesses("postgres");
    if (store.kind !== "postgres") throw new Error("unreachable");
    const mark = accountStoreOf(store).changes();
    try {
      await Bun.sleep(100); // the first poll has read the version
      const before = mark.read();
      // A version bump with no notification, as when the listening connection was down.
      await store.pg.money`UPDATE key_changes SET version = version + 1 WHERE id = 1`;
      expect(await within(1000, async () => mark.read() !== before)).toBeLessThan(1000);
    } finally {
      mark.stop();
    }
  });

  test("two processes creating an account's free key at once: exactly one gets it", async () => {
    const [a, b] = await twoProcesses("postgres");
    await a.createAccount("race");
    const outcomes = await Promise.allSettled([...Array(6)].map((_, i) => (i % 2 ? a : b).createKey({ account: "race", kind: "free" })));
    expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(1);
    expect((await a.listKeys("race")).filter((k) => k.kind === "free")).toHaveLength(1);
  });

  test("two processes creating one account name at once: one account, the others a conflict", async () => {
    const [a, b] = await twoProcesses("postgres");
    const outcomes = await Promise.allSettled([...Array(6)].map((_, i) => (i % 2 ? a : b).createAccount("same")));
    expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(1);
    expect(outcomes.filter((o) => o.status === "rejected").map((o) => ((o as PromiseRejectedResult).reason as { code: string }).code)).toEqual(Array(5).fill("conflict"));
  });
});
