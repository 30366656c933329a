import type { AccountService } from "../accounts/service";
import type { KeyInfo, Principal } from "../accounts/types";
import { ApiError } from "../../lib/errors";
import type { BatchesService } from "../batches/service";
import { unixSeconds, type Clock } from "../../lib/clock";
import type { FilesService, Owner } from "../files/service";
import type { RentalsService } from "../rentals/service";
import type { Registry } from "../../3-engines/registry";
import { modelControl } from "../residency/service";
import type { UsageReports } from "../../4-store/reports";
import type { NodeRow } from "../../4-store/nodes";

// What the console shows of one account, read through the same services the API uses (batches,
// files, rentals, accounts): the console adds only account-wide views (an account's keys share its
// balance, batches and rentals) and the ownership check that goes with them.

export interface ConsoleDeps {
  clock: Clock;
  accounts: AccountService;
  /** The usage rows' reads (the Usage page). */
  usage: UsageReports;
  batches: BatchesService;
  files: FilesService;
  rentals: RentalsService;
  registry: Registry;
  /**
   * A PostgreSQL store's cluster (issue 45): this node's id and the other live nodes as of its
   * last beat, whose models the Models page lists too. Absent on SQLite (one node).
   */
  cluster?: { self(): string; others(): readonly NodeRow[] };
  /** A model's price as /v1/models shows it (USD; billing/pricing.ts pricingOf), for the Models page. */
  pricing?: (id: string) => Record<string, number> | undefined;
}

const usd = (micros: number) => micros / 1_000_000;
const ENDED = new Set(["completed", "failed", "expired", "cancelled"]);

export type ConsoleViews = ReturnType<typeof createConsoleViews>;

export function createConsoleViews(d: ConsoleDeps) {
  const models = modelControl(d.registry);

  /** A resource of this account, as its key: another account's is "not found", as in the API. */
  async function ownerOf(row: { key_id: string; account_id: string } | null | undefined, accountId: string, what: string, id: string): Promise<Owner & { principal: Principal }> {
    if (!row || row.account_id !== accountId) throw new ApiError("not_found", `No such ${what}: ${id}`);
    const principal = (await d.accounts.principalById(row.key_id))!;
    return { keyId: row.key_id, accountId, principal };
  }
  /** One of the account's keys by id (a full key is not a reference here). */
  async function ownKey(accountName: string, keyId: string) {
    const info = keyId.startsWith("key_") ? (await d.accounts.listKeys(accountName)).find((k) => k.id === keyId) : undefined;
    if (!info) throw new ApiError("not_found", `No such key: ${keyId}`, { param: "key" });
    return info;
  }

  return {
    async account(accountId: string) {
      const a = await d.accounts.getAccount(accountId);
      return { id: a.id, name: a.name, role: a.role, balance_usd: usd(a.balance_micros), trial_tokens_remaining: a.trial_tokens_remaining, trial_tokens_used: a.trial_tokens_used };
    },

    // The account's console key (the chat's) is not one of its keys: its secret was never shown.
    keys: async (accountName: string) => ({ data: (await d.accounts.listKeys(accountName)).filter((k) => k.purpose === "api").map(keyView) }),
    async createKey(accountName: string, body: { kind?: unknown; name?: unknown; rental?: unknown }) {
      if (body.kind !== "free" && body.kind !== "premium") throw new ApiError("invalid_request", 'kind must be "free" or "premium"', { param: "kind" });
      if (body.name !== undefined && (typeof body.name !== "string" || body.name.length > 64)) throw new ApiError("invalid_request", "name: up to 64 characters", { param: "name" });
      const made = await d.accounts.createKey({ account: accountName, kind: body.kind, name: (body.name as string | undefined)?.trim() || undefined, scopes: body.rental === true ? ["inference", "rental"] : ["inference"] });
      return { key: made.key, info: keyView(made.info) };
    },
    revokeKey: async (accountName: string, keyId: string) => ({ info: keyView(await d.accounts.revokeKey((await ownKey(accountName, keyId)).id)) }),
    async rotateKey(accountName: string, keyId: string) {
      const made = await d.accounts.rotateKey((await ownKey(accountName, keyId)).id);
      return { key: made.key, info: keyView(made.info) };
    },
    async updateKey(accountName: string, keyId: string, body: { rental?: unknown; max_active_rentals?: unknown }) {
      const key = await ownKey(accountName, keyId);
      if (body.rental !== undefined && typeof body.rental !== "boolean") throw new ApiError("invalid_request", "rental must be true or false", { param: "rental" });
      if (body.max_active_rentals !== undefined && (typeof body.max_active_rentals !== "number" || !Number.isInteger(body.max_active_rentals)))
        throw new ApiError("invalid_request", "max_active_rentals must be a whole number ≥ 0", { param: "max_active_rentals" });
      let info = key;
      if (body.max_active_rentals !== undefined) info = await d.accounts.setKey(key.id, { maxActiveRentals: body.max_active_rentals as number });
      if (body.rental !== undefined) info = await d.accounts.setScope(key.id, "rental", body.rental);
      return { info: keyView(info) };
    },

    async usage(accountId: string, days: number) {
      if (!Number.isInteger(days) || days < 1 || days > 366) throw new ApiError("invalid_request", "days must be 1–366", { param: "days" });
      const since = d.clock.now() - days * 86_400_000;
      return {
        days: (await d.usage.byDay(accountId, since)).map(({ cost_micros, ...r }) => ({ ...r, cost_usd: usd(cost_micros) })),
        recent: (await d.usage.recent(accountId, 50)).map(({ cost_micros, last4, batch, purpose, ...r }) => ({
          ...r,
          created_at: unixSeconds(r.created_at),
          batch: batch === 1,
          cost_usd: usd(cost_micros),
          key: purpose === "console" ? "console chat" : `sk-apl-…${last4}`,
        })),
      };
    },

    /** One request's settled usage (the chat shows each answer's cost); not_found until it is settled. */
    async requestUsage(accountId: string, requestId: string) {
      const r = typeof requestId === "string" && /^[\w-]{1,100}$/.test(requestId) ? await d.usage.ofRequest(accountId, requestId) : null;
      if (!r) throw new ApiError("not_found", `No settled request ${String(requestId).slice(0, 100)} of this account`, { param: "id" });
      const { cost_micros, created_at, ...rest } = r;
      return { ...rest, created_at: unixSeconds(created_at), cost_usd: usd(cost_micros) };
    },

    async batches(accountId: string) {
      const data = await d.batches.ofAccount(accountId, 100);
      return { data: data.map((b) => ({ ...b, ended: ENDED.has(b.status) })) };
    },
    async cancelBatch(accountId: string, id: string) {
      const owner = await ownerOf(await d.batches.ownerOf(id), accountId, "batch", id);
      return d.batches.cancel(owner, id);
    },
    async fileContent(accountId: string, id: string) {
      const owner = await ownerOf(await d.files.byId(id), accountId, "file", id);
      return { file: await d.files.content(owner, id), name: (await d.files.get(owner, id)).filename };
    },

    // Every live node's free GPUs on a cluster, as GET /api/v1/gpus lists them.
    gpus: async () => ({ data: await d.rentals.offered() }),
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

    /**
     * The served models with their residency (state, device, memory, idle time, requests in
     * flight), as `appliance ps` shows it. On a cluster, every live node's, each row naming its
     * `node` (`node` at the top: this one's id): this node's live, the others' as of their last
     * beat (loaded or not, in flight, slots). Each row carries its `pricing` where it is known
     * (this node's from the live prices, another node's from its beat).
     */
    models() {
      const residency = new Map(models.list().data.map((s) => [s.id, s]));
      const own = d.registry.list().map((m) => {
        const pricing = d.pricing?.(m.id);
        return {
          ...residency.get(m.id),
          id: m.id,
          name: m.name,
          kind: m.kind,
          max_context: m.max_context,
          supports_vision: m.supports_vision === true,
          ...(pricing ? { pricing } : {}),
        };
      });
      if (!d.cluster) return { data: own };
      const self = d.cluster.self();
      const others = d.cluster.others().flatMap((n) =>
        n.models.map((m) => ({
          node: n.id,
          as_of: "heartbeat" as const,
          heartbeat_age_s: Math.round(n.ageMs / 100) / 10,
          id: m.id,
          // A node of an older build beats no name.
          name: m.name ?? m.id,
          kind: m.kind,
          max_context: m.max_context,
          supports_vision: m.vision,
          state: m.loaded ? "loaded" : "unloaded",
          in_flight: m.in_flight,
          slots: m.slots,
          ...(m.pricing ? { pricing: m.pricing } : {}),
        })),
      );
      return { node: self, data: [...own.map((m) => ({ node: self, as_of: "live" as const, ...m })), ...others] };
    },

    admin: {
      accounts: async () => ({
        data: (await d.accounts.listAccounts()).map((a) => ({ id: a.id, name: a.name, role: a.role, balance_usd: usd(a.balance_micros), trial_tokens_remaining: a.trial_tokens_remaining, active_keys: a.active_keys })),
      }),
      loadModel: (id: string) => models.load(id),
      unloadModel: (id: string) => models.unload(id),
      async credit(name: string, body: { usd?: unknown }) {
        if (typeof body.usd !== "number" || !Number.isFinite(body.usd) || body.usd <= 0 || body.usd > 1_000_000)
          throw new ApiError("invalid_request", "usd must be a number > 0 and ≤ 1,000,000", { param: "usd" });
        const a = await d.accounts.credit(name, Math.round(body.usd * 1_000_000), "console credit");
        return { id: a.id, name: a.name, role: a.role, balance_usd: usd(a.balance_micros), trial_tokens_remaining: a.trial_tokens_remaining, active_keys: a.active_keys };
      },
    },
  };
}

function keyView(k: KeyInfo) {
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
