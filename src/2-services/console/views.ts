import type { Database } from "bun:sqlite";
import type { AccountService } from "../accounts/service";
import type { Principal } from "../accounts/types";
import { ApiError } from "../../lib/errors";
import type { BatchesService } from "../batches/service";
import { unixSeconds, type Clock } from "../../lib/clock";
import type { FilesService, Owner } from "../files/service";
import { toGpuEntry } from "../rentals/inventory";
import type { RentalsService } from "../rentals/service";
import type { Registry } from "../../3-engines/registry";
import { modelControl } from "../residency/service";

// What the console shows of one account, read through the same services the API uses (batches,
// files, rentals, accounts): the console adds only account-wide views (an account's keys share its
// balance, batches and rentals) and the ownership check that goes with them.

export interface ConsoleDeps {
  db: Database;
  clock: Clock;
  accounts: AccountService;
  batches: BatchesService;
  files: FilesService;
  rentals: RentalsService;
  registry: Registry;
}

const usd = (micros: number) => micros / 1_000_000;
const ENDED = new Set(["completed", "failed", "expired", "cancelled"]);

export type ConsoleViews = ReturnType<typeof createConsoleViews>;

export function createConsoleViews(d: ConsoleDeps) {
  const q = {
    usageByDay: d.db.query<
      { day: string; model: string; endpoint: string; requests: number; input_tokens: number; output_tokens: number; cost_micros: number },
      { account: string; since: number }
    >(
      `SELECT date(created_at / 1000, 'unixepoch') AS day, model, endpoint, COUNT(*) AS requests,
              SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens, SUM(cost_micros) AS cost_micros
         FROM usage WHERE account_id = $account AND created_at >= $since
        GROUP BY day, model, endpoint ORDER BY day, model, endpoint`,
    ),
    recent: d.db.query<
      { created_at: number; model: string; endpoint: string; input_tokens: number; output_tokens: number; cost_micros: number; batch: number; last4: string },
      { account: string; limit: number }
    >(
      `SELECT u.created_at, u.model, u.endpoint, u.input_tokens, u.output_tokens, u.cost_micros, u.batch, k.last4
         FROM usage u JOIN api_keys k ON k.id = u.key_id
        WHERE u.account_id = $account ORDER BY u.created_at DESC, u.id DESC LIMIT $limit`,
    ),
  };

  const models = modelControl(d.registry);

  /** A resource of this account, as its key: another account's is "not found", as in the API. */
  function ownerOf(row: { key_id: string; account_id: string } | null | undefined, accountId: string, what: string, id: string): Owner & { principal: Principal } {
    if (!row || row.account_id !== accountId) throw new ApiError("not_found", `No such ${what}: ${id}`);
    const principal = d.accounts.principalById(row.key_id)!;
    return { keyId: row.key_id, accountId, principal };
  }
  /** One of the account's keys by id (a full key is not a reference here). */
  function ownKey(accountName: string, keyId: string) {
    const info = keyId.startsWith("key_") ? d.accounts.listKeys(accountName).find((k) => k.id === keyId) : undefined;
    if (!info) throw new ApiError("not_found", `No such key: ${keyId}`, { param: "key" });
    return info;
  }

  return {
    account(accountId: string) {
      const a = d.accounts.getAccount(accountId);
      return { id: a.id, name: a.name, role: a.role, balance_usd: usd(a.balance_micros), trial_tokens_remaining: a.trial_tokens_remaining, trial_tokens_used: a.trial_tokens_used };
    },

    keys: (accountName: string) => ({ data: d.accounts.listKeys(accountName).map(keyView) }),
    createKey(accountName: string, body: { kind?: unknown; name?: unknown; rental?: unknown }) {
      if (body.kind !== "free" && body.kind !== "premium") throw new ApiError("invalid_request", 'kind must be "free" or "premium"', { param: "kind" });
      if (body.name !== undefined && (typeof body.name !== "string" || body.name.length > 64)) throw new ApiError("invalid_request", "name: up to 64 characters", { param: "name" });
      const made = d.accounts.createKey({ account: accountName, kind: body.kind, name: (body.name as string | undefined)?.trim() || undefined, scopes: body.rental === true ? ["inference", "rental"] : ["inference"] });
      return { key: made.key, info: keyView(made.info) };
    },
    revokeKey: (accountName: string, keyId: string) => ({ info: keyView(d.accounts.revokeKey(ownKey(accountName, keyId).id)) }),
    rotateKey(accountName: string, keyId: string) {
      const made = d.accounts.rotateKey(ownKey(accountName, keyId).id);
      return { key: made.key, info: keyView(made.info) };
    },
    updateKey(accountName: string, keyId: string, body: { rental?: unknown; max_active_rentals?: unknown }) {
      const key = ownKey(accountName, keyId);
      if (body.rental !== undefined && typeof body.rental !== "boolean") throw new ApiError("invalid_request", "rental must be true or false", { param: "rental" });
      if (body.max_active_rentals !== undefined && (typeof body.max_active_rentals !== "number" || !Number.isInteger(body.max_active_rentals)))
        throw new ApiError("invalid_request", "max_active_rentals must be a whole number ≥ 0", { param: "max_active_rentals" });
      let info = key;
      if (body.max_active_rentals !== undefined) info = d.accounts.setKey(key.id, { maxActiveRentals: body.max_active_rentals as number });
      if (body.rental !== undefined) info = d.accounts.setScope(key.id, "rental", body.rental);
      return { info: keyView(info) };
    },

    usage(accountId: string, days: number) {
      if (!Number.isInteger(days) || days < 1 || days > 366) throw new ApiError("invalid_request", "days must be 1–366", { param: "days" });
      const since = d.clock.now() - days * 86_400_000;
      return {
        days: q.usageByDay.all({ account: accountId, since }).map(({ cost_micros, ...r }) => ({ ...r, cost_usd: usd(cost_micros) })),
        recent: q.recent.all({ account: accountId, limit: 50 }).map(({ cost_micros, last4, batch, ...r }) => ({
          ...r,
          created_at: unixSeconds(r.created_at),
          batch: batch === 1,
          cost_usd: usd(cost_micros),
          key: `sk-apl-…${last4}`,
        })),
      };
    },

    async batches(accountId: string) {
      const data = await d.batches.ofAccount(accountId, 100);
      return { data: data.map((b) => ({ ...b, ended: ENDED.has(b.status) })) };
    },
    async cancelBatch(accountId: string, id: string) {
      const owner = ownerOf(await d.batches.ownerOf(id), accountId, "batch", id);
      return d.batches.cancel(owner, id);
    },
    async fileContent(accountId: string, id: string) {
      const owner = ownerOf(await d.files.byId(id), accountId, "file", id);
      return { file: await d.files.content(owner, id), name: (await d.files.get(owner, id)).filename };
    },

    gpus: async () => ({ data: (await d.rentals.gpus()).map(toGpuEntry) }),
    async rentals(accountId: string) {
      const data = [];
      for (const { keyId, rental } of await d.rentals.ofAccount(accountId, 100)) {
        const principal = (await d.accounts.principalById(keyId))!;
        data.push({ ...rental, key: principal.display });
      }
      return { data };
    },
    async stopRental(accountId: string, id: string) {
      const owner = await ownerOf(await d.rentals.ownerOf(id), accountId, "rental", id);
      return d.rentals.remove(owner.principal, id);
    },

    /** The served models with their residency (state, device, memory, idle time, requests in flight), as `appliance ps` shows it. */
    models() {
      const residency = new Map(models.list().data.map((s) => [s.id, s]));
      return {
        data: d.registry.list().map((m) => ({
          ...residency.get(m.id),
          id: m.id,
          name: m.name,
          kind: m.kind,
          max_context: m.max_context,
          supports_vision: m.supports_vision === true,
        })),
      };
    },

    admin: {
      accounts: () => ({
        data: d.accounts.listAccounts().map((a) => ({ id: a.id, name: a.name, role: a.role, balance_usd: usd(a.balance_micros), trial_tokens_remaining: a.trial_tokens_remaining, active_keys: a.active_keys })),
      }),
      loadModel: (id: string) => models.load(id),
      unloadModel: (id: string) => models.unload(id),
      credit(name: string, body: { usd?: unknown }) {
        if (typeof body.usd !== "number" || !Number.isFinite(body.usd) || body.usd <= 0 || body.usd > 1_000_000)
          throw new ApiError("invalid_request", "usd must be a number > 0 and ≤ 1,000,000", { param: "usd" });
        const a = d.accounts.credit(name, Math.round(body.usd * 1_000_000), "console credit");
        return { id: a.id, name: a.name, role: a.role, balance_usd: usd(a.balance_micros), trial_tokens_remaining: a.trial_tokens_remaining, active_keys: a.active_keys };
      },
    },
  };
}

function keyView(k: ReturnType<AccountService["getKey"]>) {
  return {
    id: k.id,
    kind: k.kind,
    name: k.name,
    display: k.display,
    scopes: k.scopes,
    max_active_rentals: k.max_active_rentals,
    created_at: unixSeconds(k.created_at),
    last_used_at: unixSeconds(k.last_used_at),
    revoked_at: unixSeconds(k.revoked_at),
  };
}
