import type { Database } from "bun:sqlite";

// Console sessions and account passwords (migration 005). A session row is keyed by the SHA-256 of
// the cookie value; the value itself is only ever in the browser.

export interface SessionRow {
  id_hash: Uint8Array;
  account_id: string;
  csrf: string;
  created_at: number;
  last_seen_at: number;
  expires_at: number;
}

export function sessionsRepo(db: Database) {
  const insert = db.query(
    "INSERT INTO console_sessions (id_hash, account_id, csrf, created_at, last_seen_at, expires_at) VALUES ($id_hash, $account_id, $csrf, $created_at, $created_at, $expires_at)",
  );
  const byHash = db.query<SessionRow, [Uint8Array]>("SELECT * FROM console_sessions WHERE id_hash = ?");
  const touch = db.query("UPDATE console_sessions SET last_seen_at = $at WHERE id_hash = $id_hash");
  const remove = db.query("DELETE FROM console_sessions WHERE id_hash = ?");
  const removeAccount = db.query("DELETE FROM console_sessions WHERE account_id = ?");
  const sweep = db.query("DELETE FROM console_sessions WHERE expires_at <= $now OR last_seen_at <= $idle");
  const passwordOf = db.query<{ password_hash: string | null }, [string]>("SELECT password_hash FROM accounts WHERE id = ?");
  const setPassword = db.query("UPDATE accounts SET password_hash = $hash WHERE id = $id");
  return {
    insert: (row: Omit<SessionRow, "last_seen_at">) => insert.run(row as any),
    byHash: (hash: Uint8Array) => byHash.get(hash),
    touch: (hash: Uint8Array, at: number) => touch.run({ id_hash: hash, at }),
    remove: (hash: Uint8Array) => remove.run(hash),
    removeAccount: (accountId: string) => removeAccount.run(accountId),
    sweep: (now: number, idleBefore: number) => sweep.run({ now, idle: idleBefore }),
    passwordHash: (accountId: string) => passwordOf.get(accountId)?.password_hash ?? null,
    setPasswordHash: (accountId: string, hash: string | null) => setPassword.run({ id: accountId, hash }),
  };
}
