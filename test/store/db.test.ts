import { afterAll, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { DB_FILE, MIGRATIONS, migrate, openDatabase, openStore, schemaVersion, StoreError } from "../../src/4-store/db";
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

test("003 keeps every batch line; a line a dead process was running is pending again", () => {
  const db = new Database(":memory:");
  migrate(db, MIGRATIONS.slice(0, 2));
  const add = db.query("INSERT INTO batch_lines (batch_id, line, custom_id, model, body, state, result, claimed_at) VALUES ('b', ?, ?, 'm', '{}', ?, ?, ?)");
  add.run(1, "done", "completed", '{"ok":1}', 5);
  add.run(2, "mid", "running", null, 6);
  add.run(3, "todo", "pending", null, null);
  expect(migrate(db)).toBe(MIGRATIONS.length - 2);
  expect(db.query("SELECT line, custom_id, state, result FROM batch_lines ORDER BY line").all()).toEqual([
    { line: 1, custom_id: "done", state: "completed", result: '{"ok":1}' },
    { line: 2, custom_id: "mid", state: "pending", result: null },
    { line: 3, custom_id: "todo", state: "pending", result: null },
  ]);
  expect(() => db.run("UPDATE batch_lines SET state = 'running' WHERE line = 3")).toThrow(/CHECK/);
  // the index the dispatch query names (INDEXED BY fails to prepare without it)
  const plan = db.query("EXPLAIN QUERY PLAN SELECT * FROM batch_lines INDEXED BY batch_lines_pending WHERE batch_id = 'b' AND state = 'pending' AND line > 0 ORDER BY line").all();
  expect(JSON.stringify(plan)).toContain("USING INDEX batch_lines_pending");
});
