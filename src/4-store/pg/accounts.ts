import type { SQL } from "bun";
import type { AccountRow, AccountStore, ChangeMark, KeyWithAccount, NewKey } from "../accounts";

// Accounts, credits and keys on PostgreSQL (the interface: ../accounts.ts), on the synchronously
// committing pool, except last-used times (asynchronous: losing one is harmless). A change to a
// key or to an account's name or role bumps key_changes and notifies `appliance_keys` (triggers of
// migration 016): every process drops its cached principals on the notification, or within one
// poll of the version when a notification was missed (a dropped listening connection).

export const KEYS_CHANNEL = "appliance_keys";
const POLL_MS = 500;

type Raw = Record<string, any>;
const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

const account = (r: Raw): AccountRow => ({
  id: r.id,
  name: r.name,
  role: r.role,
  balance_micros: Number(r.balance_micros),
  trial_tokens_used: Number(r.trial_tokens_used),
  created_at: Number(r.created_at),
});

const key = (r: Raw): KeyWithAccount => ({
  id: r.id,
  account_id: r.account_id,
  kind: r.kind,
  name: r.name,
  secret_hash: new Uint8Array(r.secret_hash),
  last4: r.last4,
  scopes: r.scopes,
  max_active_rentals: num(r.max_active_rentals),
  rpm_limit: num(r.rpm_limit),
  inflight_limit: num(r.inflight_limit),
  created_at: Number(r.created_at),
  last_used_at: num(r.last_used_at),
  revoked_at: num(r.revoked_at),
  rotated_from: r.rotated_from,
  purpose: r.purpose,
  account_name: r.account_name,
  account_role: r.account_role,
});

export function postgresAccountStore(money: SQL, fast: SQL, onError: (what: string, e: unknown) => void = () => {}): AccountStore {
  const SELECT_KEY = "SELECT k.*, a.name AS account_name, a.role AS account_role FROM api_keys k JOIN accounts a ON a.id = k.account_id";
  const keys = (rest: string, ...params: unknown[]): Promise<Raw[]> => money.unsafe(`${SELECT_KEY} ${rest}`, params);
  const one = async <T>(rows: Promise<Raw[]>, map: (r: Raw) => T): Promise<T | null> => {
    const [r] = await rows;
    return r ? map(r) : null;
  };

  /** `replacing`: a rotation's new key takes the old one's place, free or not. */
  async function insertKey(tx: SQL, row: NewKey, replacing = false): Promise<boolean> {
    // The account's row lock makes "never had a free key" hold against another process inserting one.
    await tx`SELECT id FROM accounts WHERE id = ${row.account_id} FOR UPDATE`;
    if (row.kind === "free" && !replacing) {
      const [had] = await tx`SELECT 1 FROM api_keys WHERE account_id = ${row.account_id} AND kind = 'free' LIMIT 1`;
      if (had) return false;
    }
    await tx`INSERT INTO api_keys (id, account_id, kind, name, secret_hash, last4, scopes, max_active_rentals, rpm_limit, inflight_limit, created_at, rotated_from, purpose)
      VALUES (${row.id}, ${row.account_id}, ${row.kind}, ${row.name}, ${row.secret_hash}, ${row.last4}, ${row.scopes}, ${row.max_active_rentals}, ${row.rpm_limit},
        ${row.inflight_limit}, ${row.created_at}, ${row.rotated_from}, ${row.purpose ?? "api"})`;
    return true;
  }

  const credit = async (tx: SQL, accountId: string, micros: number, note: string, at: number) => {
    await tx`INSERT INTO credits (account_id, amount_micros, note, created_at) VALUES (${accountId}, ${micros}, ${note}, ${at})`;
    await tx`UPDATE accounts SET balance_micros = balance_micros + ${micros} WHERE id = ${accountId}`;
  };

  return {
    accountByName: (name) => one(money`SELECT * FROM accounts WHERE name = ${name}`, account),
    accountById: (id) => one(money`SELECT * FROM accounts WHERE id = ${id}`, account),
    listAccounts: async () => (await money`SELECT * FROM accounts ORDER BY created_at, name`).map(account),
    countAccounts: async () => Number((await money`SELECT COUNT(*) AS n FROM accounts`)[0].n),
    createAccount: (row, first) =>
      money.begin(async (tx) => {
        const [made] = await tx`INSERT INTO accounts (id, name, role, created_at) VALUES (${row.id}, ${row.name}, ${row.role}, ${row.created_at})
          ON CONFLICT (name) DO NOTHING RETURNING id`;
        if (!made) return false;
        if (first) await credit(tx, row.id, first.micros, first.note, row.created_at);
        return true;
      }),
    credit: (accountId, micros, note, at) => money.begin((tx) => credit(tx, accountId, micros, note, at)),
    creditTotal: async (accountId) => Number((await money`SELECT COALESCE(SUM(amount_micros), 0) AS total FROM credits WHERE account_id = ${accountId}`)[0].total),
    keyByHash: (hash) => one(keys("WHERE k.secret_hash = $1", hash), key),
    keyById: (id) => one(keys("WHERE k.id = $1", id), key),
    keysByAccount: async (accountId) => (await keys("WHERE k.account_id = $1 ORDER BY k.created_at, k.id", accountId)).map(key),
    allKeys: async () => (await keys("ORDER BY a.name, k.created_at, k.id")).map(key),
    insertKey: (row) => money.begin((tx) => insertKey(tx, row)),
    revokeKey: async (id, at) => (await money`UPDATE api_keys SET revoked_at = ${at} WHERE id = ${id} AND revoked_at IS NULL RETURNING id`).length > 0,
    rotateKey: (oldId, row, at) =>
      money.begin(async (tx) => {
        const [old] = await tx`UPDATE api_keys SET revoked_at = ${at} WHERE id = ${oldId} AND revoked_at IS NULL RETURNING id`;
        if (!old) return false;
        await insertKey(tx, row, true);
        await tx`UPDATE rentals SET key_id = ${row.id} WHERE key_id = ${oldId} AND status IN ('pending', 'running', 'stopping')`;
        return true;
      }),
    updateKey: async (row) =>
      void (await money`UPDATE api_keys SET name = ${row.name}, scopes = ${row.scopes}, max_active_rentals = ${row.max_active_rentals},
        rpm_limit = ${row.rpm_limit}, inflight_limit = ${row.inflight_limit} WHERE id = ${row.id}`),
    consoleKey: (accountId, fresh) =>
      money.begin(async (tx) => {
        const active = () => tx.unsafe(`${SELECT_KEY} WHERE k.account_id = $1 AND k.purpose = 'console' AND k.revoked_at IS NULL`, [accountId]) as Promise<Raw[]>;
        // insertKey takes the account's row lock first: a second process waits, then finds the key made.
        await tx`SELECT id FROM accounts WHERE id = ${accountId} FOR UPDATE`;
        const [have] = await active();
        if (have) return key(have);
        await insertKey(tx, { ...fresh, purpose: "console" });
        return key((await active())[0]!);
      }),
    // `.then` sends it: a query nobody awaits is never run.
    touchKey: (id, at) => void fast`UPDATE api_keys SET last_used_at = ${at} WHERE id = ${id}`.then(undefined, (e) => onError("key last-used time", e)),
    changes: () => watchKeyChanges(money, fast, onError),
  };
}

/** The mark moves on each notification, and when a poll finds the version moved (a notification missed). */
function watchKeyChanges(listenOn: SQL, pollOn: SQL, onError: (what: string, e: unknown) => void): ChangeMark {
  let mark = 0;
  let version: string | null = null;
  let stopped = false;
  const subscription = listenOn.listen(KEYS_CHANNEL, () => void mark++).catch((e) => {
    onError("listening for key changes", e);
    return null;
  });
  let polling = false;
  const poll = async () => {
    if (polling || stopped) return;
    polling = true;
    try {
      const [row] = await pollOn`SELECT version FROM key_changes WHERE id = 1`;
      const v = String(row?.version ?? "0");
      // The first reading counts as a change too: a change committed before it (and before the
      // LISTEN was acknowledged) would otherwise be in the baseline, unseen.
      if (v !== version) mark++;
      version = v;
    } catch (e) {
      mark++; // cannot tell: treat as changed
      onError("polling key changes", e);
    } finally {
      polling = false;
    }
  };
  void poll();
  const timer = setInterval(poll, POLL_MS);
  timer.unref?.();
  return {
    read: () => mark,
    stop: () => {
      stopped = true;
      clearInterval(timer);
      void subscription.then((s) => s?.unlisten()).catch(() => {});
    },
  };
}
