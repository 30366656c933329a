import type { Principal } from "../accounts/types";
import { ApiError } from "../../lib/errors";
import { unixSeconds as seconds, type Clock } from "../../lib/clock";
import type { FilesService, Owner } from "../files/service";
import { newId } from "../../lib/ids";
import type { BatchRow, BatchStore } from "../../4-store/batches";
import { isBatchEndpoint, BATCH_ENDPOINTS } from "./endpoints";

// Batches (spec §2.10, §3, §4): created against an uploaded input file, validated and run in the
// background by the batch worker, listed and cancelled by the key that created them (§5.6).

const WINDOW_MS = 24 * 3_600_000;

export interface BatchObject {
  id: string;
  object: "batch";
  endpoint: string;
  errors: { object: "list"; data: { code: string; message: string; param: string | null; line: number | null }[] } | null;
  input_file_id: string;
  completion_window: string;
  status: BatchRow["status"];
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: number;
  in_progress_at: number | null;
  expires_at: number;
  finalizing_at: number | null;
  completed_at: number | null;
  failed_at: number | null;
  expired_at: number | null;
  cancelling_at: number | null;
  cancelled_at: number | null;
  request_counts: { total: number; completed: number; failed: number };
  metadata: Record<string, string> | null;
}

export interface CreateBatch {
  input_file_id: string;
  endpoint: string;
  completion_window: string;
  metadata?: Record<string, string> | null;
}

export type BatchesService = ReturnType<typeof createBatchesService>;

export function createBatchesService(deps: { store: BatchStore; files: FilesService; clock: Clock; notify?: () => void }) {
  const batches = deps.store;

  async function owned(owner: Owner, id: string): Promise<BatchRow> {
    const row = await batches.byId(id);
    if (!row || row.key_id !== owner.keyId) throw new ApiError("not_found", `No such Batch object: ${id}`, { param: "batch_id" });
    return row;
  }

  return {
    async create(principal: Principal, req: CreateBatch): Promise<BatchObject> {
      if (!isBatchEndpoint(req.endpoint))
        throw new ApiError("invalid_request", `endpoint must be one of ${Object.keys(BATCH_ENDPOINTS).join(", ")}`, { param: "endpoint" });
      if (req.completion_window !== "24h") throw new ApiError("invalid_request", 'completion_window must be "24h"', { param: "completion_window" });
      checkMetadata(req.metadata);
      const file = await deps.files.row(principal, req.input_file_id);
      if (file.purpose !== "batch") throw new ApiError("invalid_request", `file ${file.id} has purpose "${file.purpose}"; a batch needs a file uploaded with purpose "batch"`, { param: "input_file_id" });
      const id = newId("batch_");
      const now = deps.clock.now();
      await batches.insert({
        id,
        key_id: principal.keyId,
        account_id: principal.accountId,
        endpoint: req.endpoint,
        input_file_id: file.id,
        completion_window: req.completion_window,
        metadata: req.metadata ? JSON.stringify(req.metadata) : null,
        created_at: now,
        expires_at: now + WINDOW_MS,
      });
      deps.notify?.();
      return toObject((await batches.byId(id))!);
    },

    get: async (owner: Owner, id: string) => toObject(await owned(owner, id)),

    async list(owner: Owner, q: { after?: string; limit?: number }) {
      const limit = q.limit ?? 20;
      if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new ApiError("invalid_request", "limit must be 1–100", { param: "limit" });
      const rows = await batches.page(owner.keyId, q.after, limit + 1);
      const data = rows.slice(0, limit).map(toObject);
      return { object: "list" as const, data, has_more: rows.length > limit, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
    },

    /** Lines not yet started are stopped; running ones finish; results so far are delivered. */
    async cancel(owner: Owner, id: string): Promise<BatchObject> {
      const row = await owned(owner, id);
      return toObject(await cancelRow(row));
    },

    /** The console: the account's batches (all its keys'), newest first. */
    ofAccount: async (accountId: string, limit: number) => (await batches.byAccount(accountId, limit)).map(toObject),
    /** Whose a batch is (the console's ownership check); null when there is none. */
    async ownerOf(id: string): Promise<{ key_id: string; account_id: string } | null> {
      const row = await batches.byId(id);
      return row ? { key_id: row.key_id, account_id: row.account_id } : null;
    },

    /** Lines pending and finished, batches by status: what /metrics shows. */
    counts: () => batches.counts(),

    /** For the CLI (the admin): any batch by id, and the most recent ones. */
    admin: {
      get: async (id: string) => {
        const row = await batches.byId(id);
        if (!row) throw new ApiError("not_found", `No such Batch object: ${id}`, { param: "batch_id" });
        return toObject(row);
      },
      recent: async (limit: number) => (await batches.recent(limit)).map(toObject),
      cancel: async (id: string) => {
        const row = await batches.byId(id);
        if (!row) throw new ApiError("not_found", `No such Batch object: ${id}`, { param: "batch_id" });
        return toObject(await cancelRow(row));
      },
    },
  };

  async function cancelRow(row: BatchRow): Promise<BatchRow> {
    if (row.status === "validating" || row.status === "in_progress") {
      // Only from a status a cancel applies to: another process may have ended the batch meanwhile.
      if (await batches.setStatus(row.id, "cancelling", deps.clock.now(), {}, ["validating", "in_progress"])) deps.notify?.();
      row = (await batches.byId(row.id))!;
    }
    if (row.status !== "cancelling") throw new ApiError("conflict", `batch ${row.id} is ${row.status} and can no longer be cancelled`, { param: "batch_id" });
    return row;
  }
}

function checkMetadata(m: Record<string, string> | null | undefined) {
  if (m == null) return;
  const entries = Object.entries(m);
  if (entries.length > 16) throw new ApiError("invalid_request", "metadata holds at most 16 keys", { param: "metadata" });
  for (const [k, v] of entries) {
    if (k.length > 64) throw new ApiError("invalid_request", `metadata key "${k.slice(0, 20)}…" is longer than 64 characters`, { param: `metadata.${k}` });
    if (typeof v !== "string" || v.length > 512) throw new ApiError("invalid_request", `metadata.${k} must be a string of at most 512 characters`, { param: `metadata.${k}` });
  }
}


export function toObject(row: BatchRow): BatchObject {
  return {
    id: row.id,
    object: "batch",
    endpoint: row.endpoint,
    errors: row.errors ? { object: "list", data: JSON.parse(row.errors) } : null,
    input_file_id: row.input_file_id,
    completion_window: row.completion_window,
    status: row.status,
    output_file_id: row.output_file_id,
    error_file_id: row.error_file_id,
    created_at: seconds(row.created_at),
    in_progress_at: seconds(row.in_progress_at),
    expires_at: seconds(row.expires_at),
    finalizing_at: seconds(row.finalizing_at),
    completed_at: seconds(row.completed_at),
    failed_at: seconds(row.failed_at),
    expired_at: seconds(row.expired_at),
    cancelling_at: seconds(row.cancelling_at),
    cancelled_at: seconds(row.cancelled_at),
    request_counts: { total: row.total, completed: row.completed, failed: row.failed },
    metadata: row.metadata ? JSON.parse(row.metadata) : null,
  };
}
