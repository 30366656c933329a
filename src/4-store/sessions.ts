import type { Database } from "bun:sqlite";

// Console sessions and account passwords (migration 005), by domain operation (issue 44): SQLite
// here, PostgreSQL in pg/sessions.ts. A session row is keyed by the SHA-256 of the cookie value;
// the value itself is only ever in the browser.

export interface SessionRow {
  id_hash: Uint8Array;
  account_id: string;
  csrf: string;
  created_at: number;
  last_seen_at: number;
  expires_at: number;
}

export interface SessionStore {
  /** Adds a session, first deleting those expired at `now` or idle since `idleBefore`. */
  open(row: Omit<SessionRow, "last_seen_at">, sweep: { now: number; idleBefore: number }): Promise<void>;
  byHash(hash: Uint8Array): Promise<SessionRow | null>;
  touch(hash: Uint8Array, at: number): Promise<void>;
  remove(hash: Uint8Array): Promise<void>;
  passwordHash(accountId: string): Promise<string | null>;
  /** Sets (or clears) the password and ends the account's sessions, in one transaction. */
  setPassword(accountId: string, hash: string | null): Promise<void>;
}

export function sqliteSessionStore(db: Database): SessionStore {
  const q = {
    insert: db.query(
      "INSERT INTO console_sessions (id_hash, account_id, csrf, created_at, last_seen_at, expires_at) VALUES ($id_hash, $account_id, $csrf, $created_at, $created_at, $expires_at)",
    ),
    byHash: db.query<SessionRow, [Uint8Array]>("SELECT * FROM console_sessions WHERE id_hash = ?"),
    touch: db.query("UPDATE console_sessions SET last_seen_at = $at WHERE id_hash = $id_hash"),
    remove: db.query("DELETE FROM console_sessions WHERE id_hash = ?"),
    removeAccount: db.query("DELETE FROM console_sessions WHERE account_id = ?"),
    sweep: db.query("DELETE FROM console_sessions WHERE expires_at <= $now OR last_seen_at <= $idle"),
    passwordOf: db.query<{ password_hash: string | null }, [string]>("SELECT password_hash FROM accounts WHERE id = ?"),
    setPassword: db.query("UPDATE accounts SET password_hash = $hash WHERE id = $id"),
  };
  return {
    open: async (row, s) =>
      db.transaction(() => {
        q.sweep.run({ now: s.now, idle: s.idleBefore });
        q.insert.run(row as any);
      })(),
    byHash: async (hash) => q.byHash.get(hash),
    touch: async (hash, at) => void q.touch.run({ id_hash: hash, at }),
    remove: async (hash) => void q.remove.run(hash),
    passwordHash: async (accountId) => q.passwordOf.get(accountId)?.password_hash ?? null,
    setPassword: async (accountId, hash) =>
      db
        .transaction(() => {
          q.setPassword.run({ id: accountId, hash });
          q.removeAccount.run(accountId);
        })
        .immediate(),
  };
}
