import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ApiError } from "../../src/1-api/http/errors";
import { DB_FILE } from "../../src/4-store/db";
import { testApp } from "../helpers/app";

const t = testApp({ config: { limits: { max_active_rentals: 2, premium_rpm: 600 } } });
const accounts = t.deps.accounts;
afterAll(() => t.close());

function apiError(f: () => unknown): ApiError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    return e as ApiError;
  }
  throw new Error("expected an ApiError");
}

describe("accounts", () => {
  test("are created with a zero balance and the full trial, or an initial credit", () => {
    expect(accounts.createAccount("ann")).toMatchObject({ name: "ann", role: "user", balance_micros: 0, trial_tokens_remaining: 250_000 });
    expect(accounts.createAccount("bob", { creditMicros: 5_000_000 }).balance_micros).toBe(5_000_000);
  });

  test("names are unique and well-formed", () => {
    expect(apiError(() => accounts.createAccount("ann")).code).toBe("conflict");
    expect(apiError(() => accounts.createAccount("no spaces")).param).toBe("name");
  });

  test("credits add to the balance and are kept as rows", () => {
    accounts.credit("bob", 250_000, "top-up");
    expect(accounts.getAccount("bob").balance_micros).toBe(5_250_000);
    expect(apiError(() => accounts.credit("bob", 0)).code).toBe("invalid_request");
    expect(apiError(() => accounts.credit("nobody", 1)).code).toBe("not_found");
  });
});

describe("keys", () => {
  test("each account gets exactly one free key", () => {
    const { key, info } = accounts.createKey({ account: "ann" });
    expect(info).toMatchObject({ kind: "free", scopes: ["inference"], rpm_limit: 20, display: `sk-apl-…${key.slice(-4)}` });
    expect(apiError(() => accounts.createKey({ account: "ann" })).code).toBe("conflict");
    // Revoking it does not make room for a second trial.
    accounts.revokeKey(info.id);
    expect(apiError(() => accounts.createKey({ account: "ann", kind: "free" })).code).toBe("conflict");
  });

  test("premium keys are unlimited in number and may carry rpm and in-flight caps", () => {
    const a = accounts.createKey({ account: "bob", kind: "premium", rpm: 100, inflight: 3 });
    const b = accounts.createKey({ account: "bob", kind: "premium" });
    expect(a.info).toMatchObject({ rpm_limit: 100, inflight_limit: 3, max_active_rentals: 2 });
    expect(accounts.authenticate(a.key)).toMatchObject({ rpm: 100, inflight: 3, kind: "premium" });
    expect(accounts.authenticate(b.key)).toMatchObject({ rpm: 600, inflight: 0 });
  });

  test("the free key's caps are fixed", () => {
    accounts.createAccount("cat");
    expect(apiError(() => accounts.createKey({ account: "cat", rpm: 5 })).param).toBe("rpm");
    const { info } = accounts.createKey({ account: "cat" });
    expect(apiError(() => accounts.setKey(info.id, { inflight: 2 })).param).toBe("inflight");
  });

  test("only a hash of the key is stored: the secret appears nowhere in the database file", () => {
    const { key } = accounts.createKey({ account: "bob", kind: "premium" });
    t.deps.db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    const bytes = readFileSync(join(t.dir, DB_FILE)).toString("latin1");
    expect(bytes).not.toContain(key.slice(7, 30));
    expect(bytes).not.toContain(key.slice(-20));
  });

  test("listings never show more than the prefix and last four characters", () => {
    const { key } = accounts.createKey({ account: "bob", kind: "premium" });
    const listed = JSON.stringify(accounts.listKeys("bob"));
    expect(listed).not.toContain(key.slice(7, 15));
    expect(listed).toContain(`sk-apl-…${key.slice(-4)}`);
  });

  test("the rental scope is off until enabled, and can be turned off again", () => {
    const { key, info } = accounts.createKey({ account: "bob", kind: "premium" });
    expect(accounts.authenticate(key)!.scopes).toEqual(["inference"]);
    expect(accounts.setScope(info.id, "rental", true).scopes).toEqual(["inference", "rental"]);
    expect(accounts.authenticate(key)!.scopes).toEqual(["inference", "rental"]);
    expect(accounts.setScope(info.id, "rental", false).scopes).toEqual(["inference"]);
    expect(apiError(() => accounts.setScope(info.id, "admin", true)).param).toBe("scope");
  });

  test("max_active_rentals defaults from config and is set per key", () => {
    const { info } = accounts.createKey({ account: "bob", kind: "premium" });
    expect(info.max_active_rentals).toBe(2);
    expect(accounts.setKey(info.id, { maxActiveRentals: 5 }).max_active_rentals).toBe(5);
    expect(apiError(() => accounts.setKey(info.id, { maxActiveRentals: -1 })).param).toBe("max_active_rentals");
  });

  test("a revoked key stops authenticating at once", () => {
    const { key, info } = accounts.createKey({ account: "bob", kind: "premium" });
    expect(accounts.authenticate(key)).not.toBeNull();
    expect(accounts.revokeKey(key).revoked_at).not.toBeNull();
    expect(accounts.authenticate(key)).toBeNull();
    expect(apiError(() => accounts.setScope(info.id, "rental", true)).code).toBe("conflict");
  });

  test("rotation issues a new secret with the same settings and revokes the old key", () => {
    const { key: oldKey, info } = accounts.createKey({ account: "bob", kind: "premium", scopes: ["inference", "rental"], rpm: 7, maxActiveRentals: 3, name: "ci" });
    const r = accounts.rotateKey(info.id);
    expect(r.key).not.toBe(oldKey);
    expect(r.info).toMatchObject({ kind: "premium", scopes: ["inference", "rental"], rpm_limit: 7, max_active_rentals: 3, name: "ci", rotated_from: info.id });
    expect(accounts.authenticate(oldKey)).toBeNull();
    expect(accounts.authenticate(r.key)!.keyId).toBe(r.info.id);
    expect(apiError(() => accounts.rotateKey(info.id)).code).toBe("conflict");
  });

  test("the free key can be rotated and keeps the account's trial", () => {
    accounts.createAccount("dan");
    const { info } = accounts.createKey({ account: "dan" });
    t.deps.db.run("UPDATE accounts SET trial_tokens_used = 1000 WHERE name = 'dan'");
    const r = accounts.rotateKey(info.id);
    expect(r.info.kind).toBe("free");
    expect(accounts.getAccount("dan").trial_tokens_remaining).toBe(249_000);
  });

  test("unknown and malformed keys do not authenticate", () => {
    expect(accounts.authenticate("sk-apl-" + "0".repeat(44))).toBeNull();
    expect(accounts.authenticate("garbage")).toBeNull();
  });
});
