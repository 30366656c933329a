import type { SQL } from "bun";
import type { SessionRow, SessionStore } from "../sessions";

// Console sessions and passwords on PostgreSQL (the interface: ../sessions.ts), on the
// synchronously committing pool: a session a browser was given, or a password set, survives a crash.

const row = (r: Record<string, any>): SessionRow => ({
  id_hash: new Uint8Array(r.id_hash),
  account_id: r.account_id,
  csrf: r.csrf,
  created_at: Number(r.created_at),
  last_seen_at: Number(r.last_seen_at),
  expires_at: Number(r.expires_at),
});

export function postgresSessionStore(money: SQL): SessionStore {
  return {
    open: (r, s) =>
      money.begin(async (tx) => {
        await tx`DELETE FROM console_sessions WHERE expires_at <= ${s.now} OR last_seen_at <= ${s.idleBefore}`;
        await tx`INSERT INTO console_sessions (id_hash, account_id, csrf, created_at, last_seen_at, expires_at)
          VALUES (${r.id_hash}, ${r.account_id}, ${r.csrf}, ${r.created_at}, ${r.created_at}, ${r.expires_at})`;
      }),
    byHash: async (hash) => {
      const [r] = await money`SELECT * FROM console_sessions WHERE id_hash = ${hash}`;
      return r ? row(r) : null;
    },
    touch: async (hash, at) => void (await money`UPDATE console_sessions SET last_seen_at = ${at} WHERE id_hash = ${hash}`),
    remove: async (hash) => void (await money`DELETE FROM console_sessions WHERE id_hash = ${hash}`),
    passwordHash: async (accountId) => {
      const [r] = await money`SELECT password_hash FROM accounts WHERE id = ${accountId}`;
      return r?.password_hash ?? null;
    },
    setPassword: (accountId, hash) =>
      money.begin(async (tx) => {
        await tx`UPDATE accounts SET password_hash = ${hash} WHERE id = ${accountId}`;
        await tx`DELETE FROM console_sessions WHERE account_id = ${accountId}`;
      }),
  };
}
