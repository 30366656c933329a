import type { Database } from "bun:sqlite";

// Accounts, credits and API keys (migration 001), by domain operation (issue 44): one async
// interface, SQLite here and PostgreSQL in pg/accounts.ts. Each operation is one transaction; the
// checks that must hold across processes (one free key per account, a rotated key still active)
// are made inside it.

export interface AccountRow {
  id: string;
  name: string;
  role: "user" | "admin";
  balance_micros: number;
  trial_tokens_used: number;
  created_at: number;
}

export interface KeyRow {
  id: string;
  account_id: string;
  kind: "free" | "premium";
  name: string;
  secret_hash: Uint8Array;
  last4: string;
  scopes: string;
  max_active_rentals: number | null;
  rpm_limit: number | null;
  inflight_limit: number | null;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
  rotated_from: string | null;
  /** "api": a key people create and present; "console": the account's console key (migration 023). */
  purpose: "api" | "console";
}

/** A key row with its account's name and role, for authentication and listings. */
export interface KeyWithAccount extends KeyRow {
  account_name: string;
  account_role: "user" | "admin";
}

export type NewKey = Omit<KeyRow, "last_used_at" | "revoked_at" | "purpose"> & { purpose?: KeyRow["purpose"] };
export type KeyUpdate = Pick<KeyRow, "id" | "name" | "scopes" | "max_active_rentals" | "rpm_limit" | "inflight_limit">;

/**
 * A mark that moves whenever keys or accounts change in another connection or process (a key
 * revoked by the CLI, or by another appliance process): principals cached before it moved are
 * dropped. Read synchronously on the request path; `stop` ends what keeps it current.
 */
export interface ChangeMark {
  read(): number;
  stop(): void;
}

export interface AccountStore {
  accountByName(name: string): Promise<AccountRow | null>;
  accountById(id: string): Promise<AccountRow | null>;
  listAccounts(): Promise<AccountRow[]>;
  countAccounts(): Promise<number>;
  /** Creates the account with its first credit, if any; false when the name is taken. */
  createAccount(row: Pick<AccountRow, "id" | "name" | "role" | "created_at">, credit?: { micros: number; note: string }): Promise<boolean>;
  /** Adds a credit row and moves the balance in one transaction. */
  credit(accountId: string, micros: number, note: string, at: number): Promise<void>;
  creditTotal(accountId: string): Promise<number>;

  keyByHash(hash: Uint8Array): Promise<KeyWithAccount | null>;
  keyById(id: string): Promise<KeyWithAccount | null>;
  keysByAccount(accountId: string): Promise<KeyWithAccount[]>;
  allKeys(): Promise<KeyWithAccount[]>;
  /** Inserts a key; a free one only if the account never had one (false: it had). */
  insertKey(row: NewKey): Promise<boolean>;
  /** false when the key was already revoked (or is unknown). */
  revokeKey(id: string, at: number): Promise<boolean>;
  /**
   * Revokes `oldId` and inserts `row` in its place, moving the old key's active rentals to it (they
   * keep running for the new secret), in one transaction; false when the old key was no longer active.
   */
  rotateKey(oldId: string, row: NewKey, at: number): Promise<boolean>;
  updateKey(row: KeyUpdate): Promise<void>;
  /** The account's active console key, inserting `fresh` (purpose "console") when it has none, in one transaction. */
  consoleKey(accountId: string, fresh: NewKey): Promise<KeyWithAccount>;
  /** Records when the key was last used (no one waits for it; a lost one is harmless). */
  touchKey(id: string, at: number): void;
  changes(): ChangeMark;
}

const SELECT_KEY =
  // Scalar subqueries, not a JOIN: bun:sqlite reads joined rows several times slower (measured 4 µs
  // vs 31 µs), and this runs on every authenticated request whose principal is not cached.
  "SELECT k.*, (SELECT name FROM accounts WHERE id = k.account_id) AS account_name, (SELECT role FROM accounts WHERE id = k.account_id) AS account_role FROM api_keys k";

export function sqliteAccountStore(db: Database): AccountStore {
  const q = {
    insertAccount: db.query("INSERT INTO accounts (id, name, role, balance_micros, trial_tokens_used, created_at) VALUES ($id, $name, $role, 0, 0, $created_at)"),
    accountById: db.query<AccountRow, [string]>("SELECT id, name, role, balance_micros, trial_tokens_used, created_at FROM accounts WHERE id = ?"),
    accountByName: db.query<AccountRow, [string]>("SELECT id, name, role, balance_micros, trial_tokens_used, created_at FROM accounts WHERE name = ?"),
    accounts: db.query<AccountRow, []>("SELECT id, name, role, balance_micros, trial_tokens_used, created_at FROM accounts ORDER BY created_at, name"),
    count: db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM accounts"),
    insertCredit: db.query("INSERT INTO credits (account_id, amount_micros, note, created_at) VALUES ($account_id, $amount, $note, $created_at)"),
    addBalance: db.query("UPDATE accounts SET balance_micros = balance_micros + $amount WHERE id = $id"),
    creditSum: db.query<{ total: number }, [string]>("SELECT COALESCE(SUM(amount_micros), 0) AS total FROM credits WHERE account_id = ?"),
    insertKey: db.query(
      `INSERT INTO api_keys (id, account_id, kind, name, secret_hash, last4, scopes, max_active_rentals, rpm_limit, inflight_limit, created_at, rotated_from, purpose)
       VALUES ($id, $account_id, $kind, $name, $secret_hash, $last4, $scopes, $max_active_rentals, $rpm_limit, $inflight_limit, $created_at, $rotated_from, $purpose)`,
    ),
    keyByHash: db.query<KeyWithAccount, [Uint8Array]>(`${SELECT_KEY} WHERE k.secret_hash = ?`),
    keyById: db.query<KeyWithAccount, [string]>(`${SELECT_KEY} WHERE k.id = ?`),
    keysByAccount: db.query<KeyWithAccount, [string]>(`${SELECT_KEY} WHERE k.account_id = ? ORDER BY k.created_at, k.id`),
    keys: db.query<KeyWithAccount, []>(`${SELECT_KEY} ORDER BY account_name, k.created_at, k.id`),
    consoleKey: db.query<KeyWithAccount, [string]>(`${SELECT_KEY} WHERE k.account_id = ? AND k.purpose = 'console' AND k.revoked_at IS NULL`),
    hadFree: db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM api_keys WHERE account_id = ? AND kind = 'free'"),
    revoke: db.query("UPDATE api_keys SET revoked_at = $at WHERE id = $id AND revoked_at IS NULL"),
    touch: db.query("UPDATE api_keys SET last_used_at = $at WHERE id = $id"),
    update: db.query(
      "UPDATE api_keys SET name = $name, scopes = $scopes, max_active_rentals = $max_active_rentals, rpm_limit = $rpm_limit, inflight_limit = $inflight_limit WHERE id = $id",
    ),
    moveRentals: db.query("UPDATE rentals SET key_id = ? WHERE key_id = ? AND status IN ('pending', 'running', 'stopping')"),
    dataVersion: db.query<{ data_version: number }, []>("PRAGMA data_version"),
  };
  const credit = (accountId: string, amount: number, note: string, at: number) => {
    q.insertCredit.run({ account_id: accountId, amount, note, created_at: at });
    q.addBalance.run({ amount, id: accountId });
  };
  /** `replacing`: a rotation's new key takes the old one's place, free or not. */
  const insertKey = (row: NewKey, replacing = false): boolean => {
    if (row.kind === "free" && !replacing && q.hadFree.get(row.account_id)!.n > 0) return false;
    q.insertKey.run({ ...row, purpose: row.purpose ?? "api" } as any);
    return true;
  };
  return {
    accountByName: async (name) => q.accountByName.get(name),
    accountById: async (id) => q.accountById.get(id),
    listAccounts: async () => q.accounts.all(),
    countAccounts: async () => q.count.get()!.n,
    createAccount: async (row, first) =>
      db
        .transaction(() => {
          if (q.accountByName.get(row.name)) return false;
          q.insertAccount.run(row);
          if (first) credit(row.id, first.micros, first.note, row.created_at);
          return true;
        })
        .immediate(),
    credit: async (accountId, micros, note, at) => db.transaction(() => credit(accountId, micros, note, at)).immediate(),
    creditTotal: async (accountId) => q.creditSum.get(accountId)!.total,
    keyByHash: async (hash) => q.keyByHash.get(hash),
    keyById: async (id) => q.keyById.get(id),
    keysByAccount: async (accountId) => q.keysByAccount.all(accountId),
    allKeys: async () => q.keys.all(),
    insertKey: async (row) => db.transaction(() => insertKey(row)).immediate(),
    revokeKey: async (id, at) => q.revoke.run({ id, at }).changes > 0,
    rotateKey: async (oldId, row, at) =>
      db
        .transaction(() => {
          if (q.revoke.run({ id: oldId, at }).changes === 0) return false;
          insertKey(row, true);
          q.moveRentals.run(row.id, oldId);
          return true;
        })
        .immediate(),
    updateKey: async (row) => void q.update.run(row),
    consoleKey: async (accountId, fresh) =>
      db
        .transaction(() => {
          const have = q.consoleKey.get(accountId);
          if (have) return have;
          insertKey({ ...fresh, purpose: "console" });
          return q.consoleKey.get(accountId)!;
        })
        .immediate(),
    touchKey: (id, at) => void q.touch.run({ id, at }),
    // SQLite's data_version moves on every commit by another connection: the CLI, a backup restore.
    changes: () => ({ read: () => q.dataVersion.get()!.data_version, stop: () => {} }),
  };
}
