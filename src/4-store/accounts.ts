import type { Database } from "bun:sqlite";

export interface AccountRow {
  id: string;
  name: string;
  role: "user" | "admin";
  balance_micros: number;
  trial_tokens_used: number;
  created_at: number;
}

export function accountsRepo(db: Database) {
  const insert = db.query(
    "INSERT INTO accounts (id, name, role, balance_micros, trial_tokens_used, created_at) VALUES ($id, $name, $role, 0, 0, $created_at)",
  );
  const byId = db.query<AccountRow, [string]>("SELECT * FROM accounts WHERE id = ?");
  const byName = db.query<AccountRow, [string]>("SELECT * FROM accounts WHERE name = ?");
  const all = db.query<AccountRow, []>("SELECT * FROM accounts ORDER BY created_at, name");
  const count = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM accounts");
  const insertCredit = db.query(
    "INSERT INTO credits (account_id, amount_micros, note, created_at) VALUES ($account_id, $amount, $note, $created_at)",
  );
  const addBalance = db.query("UPDATE accounts SET balance_micros = balance_micros + $amount WHERE id = $id");
  const creditSum = db.query<{ total: number }, [string]>(
    "SELECT COALESCE(SUM(amount_micros), 0) AS total FROM credits WHERE account_id = ?",
  );

  return {
    insert(row: Pick<AccountRow, "id" | "name" | "role" | "created_at">): void {
      insert.run(row);
    },
    byId: (id: string) => byId.get(id),
    byName: (name: string) => byName.get(name),
    list: () => all.all(),
    count: () => count.get()!.n,
    /** Adds a credit row and moves the balance in one transaction. */
    credit: db.transaction((accountId: string, amount: number, note: string, at: number) => {
      insertCredit.run({ account_id: accountId, amount, note, created_at: at });
      addBalance.run({ amount, id: accountId });
    }),
    creditTotal: (accountId: string) => creditSum.get(accountId)!.total,
  };
}
export type AccountsRepo = ReturnType<typeof accountsRepo>;
