import { afterAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ApiError } from "../../src/1-api/http/errors";
import { createAccountService, type AccountService } from "../../src/2-services/accounts/service";
import { systemClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { DB_FILE, openStore } from "../../src/4-store/db";
import { accountStoreOf, openPostgresStore, sqliteStore, type Store } from "../../src/4-store/store";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Accounts and keys through the service every surface uses (API, console, CLI), one suite on a real
// SQLite file and on PostgreSQL (issue 44): the same answers on both.

const limits = validateConfig({ limits: { max_active_rentals: 2, premium_rpm: 600 } }).limits;

interface Backend {
  store: Store;
  /** Everything the store holds, as bytes a secret could hide in. */
  raw(): Promise<string>;
  exec(sql: string): Promise<void>;
}

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function onSqlite(): Promise<Backend> {
  const dir = tempDir();
  dirs.push(dir);
  const db = openStore(dir, { synchronous: "normal" });
  return {
    store: sqliteStore(db),
    raw: async () => {
      db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
      return readFileSync(join(dir, DB_FILE)).toString("latin1");
    },
    exec: async (sql) => void db.run(sql),
  };
}

async function onPostgres(): Promise<Backend> {
  const store = await openPostgresStore(await freshDatabase("accounts"));
  const sql = store.pg.money;
  return {
    store,
    raw: async () => {
      const tables = await sql`SELECT tablename FROM pg_tables WHERE schemaname = 'public'`;
      let all = "";
      for (const { tablename } of tables) all += JSON.stringify(await sql.unsafe(`SELECT t::text AS row FROM "${tablename}" t`));
      return all;
    },
    exec: async (q) => void (await sql.unsafe(q)),
  };
}

async function apiError(f: () => unknown): Promise<ApiError> {
  try {
    await f();
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    return e as ApiError;
  }
  throw new Error("expected an ApiError");
}

for (const [name, open] of [["SQLite", onSqlite], ["PostgreSQL", onPostgres]] as const) {
describe(`on ${name}`, () => {
  let b: Backend;
  let accounts: AccountService;
  test("opens", async () => {
    b = await open();
    accounts = createAccountService(accountStoreOf(b.store), limits, systemClock);
  });
  afterAll(async () => {
    accounts?.close();
    await b?.store.close();
  });

  describe("accounts", () => {
    test("are created with a zero balance and the full trial, or an initial credit", async () => {
      expect(await accounts.createAccount("ann")).toMatchObject({ name: "ann", role: "user", balance_micros: 0, trial_tokens_remaining: 250_000 });
      expect((await accounts.createAccount("bob", { creditMicros: 5_000_000 })).balance_micros).toBe(5_000_000);
    });

    test("names are unique and well-formed", async () => {
      expect((await apiError(async () => await accounts.createAccount("ann"))).code).toBe("conflict");
      expect((await apiError(async () => await accounts.createAccount("no spaces"))).param).toBe("name");
    });

    test("credits add to the balance and are kept as rows", async () => {
      await accounts.credit("bob", 250_000, "top-up");
      expect((await accounts.getAccount("bob")).balance_micros).toBe(5_250_000);
      expect((await apiError(async () => await accounts.credit("bob", 0))).code).toBe("invalid_request");
      expect((await apiError(async () => await accounts.credit("nobody", 1))).code).toBe("not_found");
    });
  });

  describe("keys", () => {
    test("each account gets exactly one free key", async () => {
      const { key, info } = await accounts.createKey({ account: "ann" });
      expect(info).toMatchObject({ kind: "free", scopes: ["inference"], rpm_limit: 20, display: `sk-apl-…${key.slice(-4)}` });
      expect((await apiError(async () => await accounts.createKey({ account: "ann" }))).code).toBe("conflict");
      // Revoking it does not make room for a second trial.
      await accounts.revokeKey(info.id);
      expect((await apiError(async () => await accounts.createKey({ account: "ann", kind: "free" }))).code).toBe("conflict");
    });

    test("premium keys are unlimited in number and may carry rpm and in-flight caps", async () => {
      const a = await accounts.createKey({ account: "bob", kind: "premium", rpm: 100, inflight: 3 });
      const b = await accounts.createKey({ account: "bob", kind: "premium" });
      expect(a.info).toMatchObject({ rpm_limit: 100, inflight_limit: 3, max_active_rentals: 2 });
      expect(await accounts.authenticate(a.key)).toMatchObject({ rpm: 100, inflight: 3, kind: "premium" });
      expect(await accounts.authenticate(b.key)).toMatchObject({ rpm: 600, inflight: 0 });
    });

    test("the free key's caps are fixed", async () => {
      await accounts.createAccount("cat");
      expect((await apiError(async () => await accounts.createKey({ account: "cat", rpm: 5 }))).param).toBe("rpm");
      const { info } = await accounts.createKey({ account: "cat" });
      expect((await apiError(async () => await accounts.setKey(info.id, { inflight: 2 }))).param).toBe("inflight");
    });

    test("only a hash of the key is stored: the secret appears nowhere in the database file", async () => {
      const { key } = await accounts.createKey({ account: "bob", kind: "premium" });
      const bytes = await b.raw();
      expect(bytes).not.toContain(key.slice(7, 30));
      expect(bytes).not.toContain(key.slice(-20));
    });

    test("listings never show more than the prefix and last four characters", async () => {
      const { key } = await accounts.createKey({ account: "bob", kind: "premium" });
      const listed = JSON.stringify(await accounts.listKeys("bob"));
      expect(listed).not.toContain(key.slice(7, 15));
      expect(listed).toContain(`sk-apl-…${key.slice(-4)}`);
    });

    test("the rental scope is off until enabled, and can be turned off again", async () => {
      const { key, info } = await accounts.createKey({ account: "bob", kind: "premium" });
      expect((await accounts.authenticate(key))!.scopes).toEqual(["inference"]);
      expect((await accounts.setScope(info.id, "rental", true)).scopes).toEqual(["inference", "rental"]);
      expect((await accounts.authenticate(key))!.scopes).toEqual(["inference", "rental"]);
      expect((await accounts.setScope(info.id, "rental", false)).scopes).toEqual(["inference"]);
      expect((await apiError(async () => await accounts.setScope(info.id, "admin", true))).param).toBe("scope");
    });

    test("max_active_rentals defaults from config and is set per key", async () => {
      const { info } = await accounts.createKey({ account: "bob", kind: "premium" });
      expect(info.max_active_rentals).toBe(2);
      expect((await accounts.setKey(info.id, { maxActiveRentals: 5 })).max_active_rentals).toBe(5);
      expect((await apiError(async () => await accounts.setKey(info.id, { maxActiveRentals: -1 }))).param).toBe("max_active_rentals");
    });

    test("a revoked key stops authenticating at once", async () => {
      const { key, info } = await accounts.createKey({ account: "bob", kind: "premium" });
      expect(await accounts.authenticate(key)).not.toBeNull();
      expect((await accounts.revokeKey(key)).revoked_at).not.toBeNull();
      expect(await accounts.authenticate(key)).toBeNull();
      expect((await apiError(async () => await accounts.setScope(info.id, "rental", true))).code).toBe("conflict");
    });

    test("rotation issues a new secret with the same settings and revokes the old key", async () => {
      const { key: oldKey, info } = await accounts.createKey({ account: "bob", kind: "premium", scopes: ["inference", "rental"], rpm: 7, maxActiveRentals: 3, name: "ci" });
      const r = await accounts.rotateKey(info.id);
      expect(r.key).not.toBe(oldKey);
      expect(r.info).toMatchObject({ kind: "premium", scopes: ["inference", "rental"], rpm_limit: 7, max_active_rentals: 3, name: "ci", rotated_from: info.id });
      expect(await accounts.authenticate(oldKey)).toBeNull();
      expect((await accounts.authenticate(r.key))!.keyId).toBe(r.info.id);
      expect((await apiError(async () => await accounts.rotateKey(info.id))).code).toBe("conflict");
    });

    test("the free key can be rotated and keeps the account's trial", async () => {
      await accounts.createAccount("dan");
      const { info } = await accounts.createKey({ account: "dan" });
      await b.exec("UPDATE accounts SET trial_tokens_used = 1000 WHERE name = 'dan'");
      const r = await accounts.rotateKey(info.id);
      expect(r.info.kind).toBe("free");
      expect((await accounts.getAccount("dan")).trial_tokens_remaining).toBe(249_000);
    });

    test("unknown and malformed keys do not authenticate", async () => {
      expect(await accounts.authenticate("sk-apl-" + "0".repeat(44))).toBeNull();
      expect(await accounts.authenticate("garbage")).toBeNull();
    });
  });
});
}
