import type { Config } from "../../lib/config";
import { fail, ok, warn, type Check } from "./check";
import type { StoreFacts } from "./store-probe";

// The store (issue 44): SQLite in the data dir, or PostgreSQL ([store] url). For PostgreSQL: the
// connection, the schema version against this build's, and this machine's clock against the
// database's (leases, rate windows and holds are timed by the database's clock, but the ledger's
// rows and expiries carry this machine's: a skew of seconds shows in them).

/** Beyond this skew, a warning: rental minutes and usage rows are stamped by each machine's clock. */
export const SKEW_WARN_MS = 2_000;

export function checkStore(config: Pick<Config, "store">, facts: StoreFacts): Check {
  const name = "store";
  if (facts.error)
    return fail(
      name,
      `${facts.kind === "postgres" ? "PostgreSQL" : "SQLite"} at ${facts.at}: ${facts.error}`,
      facts.kind === "postgres"
        ? "check [store] url (or APPLIANCE_STORE_URL): host, port, user, password and database; `psql URL` should connect"
        : "the data dir must be writable by this user",
    );
  if (facts.schema > facts.known)
    return fail(name, `${facts.at} holds schema ${facts.schema}, written by a newer version (this build knows ${facts.known})`, "run the newer version, or restore a backup made with this one");
  const schema = facts.schema === 0 ? "empty (migrated at first start, or with `appliance store migrate`)" : facts.schema < facts.known ? `schema ${facts.schema}, ${facts.known - facts.schema} migration(s) to apply at start` : `schema ${facts.schema}`;
  if (facts.kind === "sqlite") return ok(name, `SQLite ${facts.at}: ${schema}${config.store.url ? "" : " (one process; [store] url shares a PostgreSQL between several)"}`);
  const skew = facts.skewMs ?? 0;
  const detail = `PostgreSQL ${facts.at}: ${schema}; this clock is ${Math.abs(Math.round(skew))} ms ${skew >= 0 ? "ahead of" : "behind"} the database's`;
  if (Math.abs(skew) > SKEW_WARN_MS) return warn(name, detail, "sync this machine's clock (systemd-timesyncd or chrony): usage rows and rental minutes carry each machine's time");
  return ok(name, detail);
}
