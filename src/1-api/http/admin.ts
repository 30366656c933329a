import { principalOf } from "./context";
import { ApiError } from "./errors";

/**
 * For routes any key authenticates (src/1-api/http/auth.ts) but only admin accounts' keys are
 * answered (GET /metrics, /api/v1/admin/…): throws 403 admin_only naming `what` for the others.
 */
export function adminKeysOnly(what: string): (request: Request) => void {
  return (request) => {
    if (principalOf(request).role !== "admin") throw new ApiError("admin_only", `${what} needs a key of an admin account`);
  };
}
