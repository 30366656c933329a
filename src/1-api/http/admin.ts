import type { Database } from "bun:sqlite";
import { accountsRepo } from "../../4-store/accounts";
import { principalOf } from "./context";
import { ApiError } from "./errors";

/**
 * For routes any key authenticates (src/1-api/http/auth.ts) but only admin accounts' keys are
 * answered (GET /metrics, /api/v1/admin/…): throws 403 admin_only naming `what` for the others.
 */
export function adminKeysOnly(db: Database, what: string): (request: Request) => void {
  const accounts = accountsRepo(db);
  return (request) => {
    if (accounts.byId(principalOf(request).accountId)?.role !== "admin") throw new ApiError("admin_only", `${what} needs a key of an admin account`);
  };
}
