import { afterAll, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { DB_FILE, MIGRATIONS, migrate, openDatabase, openStore, schemaVersion, StoreError } from "../../src/store/db";
import { tempDir } from "../helpers/app";

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function dir() {
  const d = tempDir();
  dirs.push(d);
  return d;
}

test("an empty data dir gets the full schema and its version", () => {
  const d = dir();
  const db = openStore(d);
  expect(schemaVersion(db)).toBe(MIGRATIONS.length);
  const tables = db.query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all().map((r) => r.name);
  expect(tables).toEqual(expect.arrayContaining(["accounts", "api_keys", "credits", "usage"]));
  db.close();
});

test("the store runs in WAL mode with foreign keys and a busy timeout", () => {
  const db = openStore(dir());
  expect(db.query("PRAGMA journal_mode").get()).toEqual({ journal_mode: "wal" });
  expect(db.query("PRAGMA foreign_keys").get()).toEqual({ foreign_keys: 1 });
  expect(db.query("PRAGMA busy_timeout").get()).toEqual({ timeout: 5000 });
  expect(db.query("PRAGMA synchronous").get()).toEqual({ synchronous: 2 });
  expect(() => db.run("INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('k', 'nobody', 'free', x'00', 'abcd', 0)")).toThrow(/FOREIGN KEY/);
  db.close();
});

test("re-opening an existing store keeps its data and applies nothing twice", () => {
  const d = dir();
  const db = openStore(d);
  db.run("INSERT INTO accounts (id, name, created_at) VALUES ('acct_1', 'kept', 1)");
  db.close();
  const again = openStore(d);
  expect(migrate(again)).toBe(0);
  expect(again.query("SELECT name FROM accounts").all()).toEqual([{ name: "kept" }]);
  again.close();
});

test("migrations apply in order from the version a file is at", () => {
  const db = new Database(":memory:");
  const steps = [
    { name: "a", sql: "CREATE TABLE t (x INTEGER)" },
    { name: "b", sql: "ALTER TABLE t ADD COLUMN y INTEGER" },
  ];
  expect(migrate(db, steps.slice(0, 1))).toBe(1);
  db.run("INSERT INTO t (x) VALUES (1)");
  expect(migrate(db, steps)).toBe(1);
  expect(schemaVersion(db)).toBe(2);
  expect(db.query("SELECT x, y FROM t").all()).toEqual([{ x: 1, y: null }]);
});

test("a failing migration leaves the file at its previous version", () => {
  const db = new Database(":memory:");
  expect(() => migrate(db, [{ name: "a", sql: "CREATE TABLE t (x)" }, { name: "b", sql: "NOT SQL" }])).toThrow();
  expect(schemaVersion(db)).toBe(0);
  expect(db.query("SELECT name FROM sqlite_master WHERE name = 't'").get()).toBeNull();
});

test("a store written by a newer version is refused with a clear error", () => {
  const d = dir();
  const db = new Database(join(d, DB_FILE));
  db.run(`PRAGMA user_version = ${MIGRATIONS.length + 5}`);
  db.close();
  expect(() => openDatabase(join(d, DB_FILE))).toThrow(StoreError);
  expect(() => openDatabase(join(d, DB_FILE))).toThrow(/newer version/);
});
