import type { Store } from "../../src/4-store/store";
import { openPostgresStore } from "../../src/4-store/store";
import { testApp, type TestApp } from "./app";
import { freshDatabase } from "./postgres";

// One suite on both stores (issue 44): the test app on its own SQLite file, or on a new database
// in the run's PostgreSQL cluster; SQL for checks written once with `?` placeholders, numbers as
// numbers on both.

export const BACKENDS = ["sqlite", "postgres"] as const;
export type BackendName = (typeof BACKENDS)[number];

export interface BackendApp {
  t: TestApp;
  /** Rows of a query with `?` placeholders; PostgreSQL's 64-bit integers and numerics as numbers. */
  rows<T = Record<string, any>>(sql: string, ...params: unknown[]): Promise<T[]>;
  run(sql: string, ...params: unknown[]): Promise<void>;
}

const NUMERIC_TYPES = new Set([20, 1700]); // int8, numeric: Bun's client gives them as strings

export async function backendApp(name: BackendName, opts: Parameters<typeof testApp>[0] = {}): Promise<BackendApp> {
  const t = testApp({ ...opts, store: name === "postgres" ? await openPostgresStore(await freshDatabase("suite")) : undefined });
  return { t, ...queriesOn(t.deps.store) };
}

function queriesOn(store: Store): Omit<BackendApp, "t"> {
  if (store.kind === "sqlite")
    return {
      rows: async (sql, ...params) => store.db.query(sql).all(...(params as any[])) as any[],
      run: async (sql, ...params) => void store.db.query(sql).run(...(params as any[])),
    };
  const numbered = (sql: string) => {
    let n = 0;
    return sql.replace(/\?/g, () => `$${++n}`);
  };
  return {
    rows: async (sql, ...params) => {
      const result = await store.pg.money.unsafe(numbered(sql), params as any[]);
      const numeric = ((result as any).columns ?? []).filter((c: { type: number }) => NUMERIC_TYPES.has(c.type)).map((c: { name: string }) => c.name);
      return [...result].map((r: Record<string, any>) => {
        for (const c of numeric) if (r[c] !== null) r[c] = Number(r[c]);
        return r;
      }) as any[];
    },
    run: async (sql, ...params) => void (await store.pg.money.unsafe(numbered(sql), params as any[])),
  };
}
