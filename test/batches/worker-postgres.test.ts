import { afterAll, beforeAll, expect, test } from "bun:test";
import type { AccountService } from "../../src/2-services/accounts/service";
import type { Principal } from "../../src/2-services/accounts/types";
import type { BatchLane, BatchLanes } from "../../src/2-services/batches/lanes";
import { createBatchesService } from "../../src/2-services/batches/service";
import { createBatchWorker, type BatchWorker } from "../../src/2-services/batches/worker";
import { createFilesService, type FilesService } from "../../src/2-services/files/service";
import type { Registry } from "../../src/3-engines/registry";
import { LineEnded } from "../../src/4-store/ledger";
import { postgresBatchStore } from "../../src/4-store/pg/batches";
import { connectPostgres, migratePostgres, type PgPools } from "../../src/4-store/pg/db";
import { postgresFileStore } from "../../src/4-store/pg/files";
import { postgresLedger } from "../../src/4-store/pg/ledger";
import { ApiError } from "../../src/lib/errors";
import { systemClock } from "../../src/lib/clock";
import { memoryLogger } from "../../src/lib/log";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: the batch worker itself on the PostgreSQL store, two of them on one database (as two
// processes would run them, each with its own pools and owner name): a batch uploaded into the
// store is validated from the store, its lines are claimed by both and settled through the ledger
// (a fake lane stands in for the chat service), one failing line is recorded once, and the output
// and error files are written into the store and read back whole. A cancel fails what no process
// holds and ends the batch once nothing is running anywhere.

let url: string;
const pools: PgPools[] = [];
const workers: BatchWorker[] = [];

const principal = { keyId: "key_w", accountId: "acct_w", accountName: "w", role: "user", kind: "premium", scopes: ["inference"], display: "sk-apl-…abcd", rpm: 0, inflight: 0, maxActiveRentals: 0 } as Principal;
const accounts = { principalById: async (id: string) => (id === principal.keyId ? principal : null) } as unknown as AccountService;
// Every model is a chat model with 3 slots: 2 batch lines at once per process.
const registry = { resolve: (model: string) => ({ id: model, kind: "chat", slots: 3 }) } as unknown as Registry;

/** One process's worth: pools, stores, services and a worker whose lane settles through the ledger after `runMs`. */
function processOn(owner: string, runMs: number, ran: string[]) {
  const p = connectPostgres(url, { max: 4 });
  pools.push(p);
  const files = createFilesService({ store: postgresFileStore(p.money, p.fast), clock: systemClock, logger: memoryLogger() });
  const store = postgresBatchStore(p.money, p.fast);
  const ledger = postgresLedger(p.money);
  const lane: BatchLane = {
    firstProblem: () => null,
    async run(who, body, call) {
      await Bun.sleep(runMs);
      if ((body as { fail?: boolean }).fail) throw new ApiError("invalid_request", "this line asks to fail", { param: "fail" });
      const row = { request_id: call.requestId, account_id: who.accountId, key_id: who.keyId, model: "chat", endpoint: call.endpoint, input_tokens: 1, output_tokens: 1, cached_tokens: 0, images: 0, batch: 1, cost_micros: 100, trial_tokens: 0, created_at: Date.now() };
      const [out] = await ledger.settle([{ row, effect: call.record({ echo: body, by: owner }) }]);
      if (out && "ended" in out) throw new LineEnded("ended elsewhere");
      ran.push(call.requestId);
      return {};
    },
  };
  const lanes: BatchLanes = { lanes: { "/v1/chat/completions": lane, "/v1/responses": lane, "/v1/embeddings": lane, "/v1/decisions": lane, "/v1/rerank": lane }, errorBody: (e) => ({ error: { message: e.message, code: e.code } }) };
  const worker = createBatchWorker({ store, files, registry, accounts, clock: systemClock, logger: memoryLogger(), owner, leaseMs: 3000 });
  worker.useLanes(lanes);
  workers.push(worker);
  return { files, worker, batches: createBatchesService({ store, files, clock: systemClock, notify: worker.notify }) };
}

beforeAll(async () => {
  url = await freshDatabase("batchworker");
  const p = connectPostgres(url);
  pools.push(p);
  await migratePostgres(p.money);
  await p.money`INSERT INTO accounts (id, name, balance_micros, created_at) VALUES ('acct_w', 'w', 1000000, 1)`;
  await p.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_w', 'acct_w', 'premium', ${new Uint8Array(Buffer.from("secret w"))}, 'abcd', 1)`;
});

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await Promise.all(pools.map((p) => p.close()));
});

/** Uploads JSONL lines as a client would (multipart, streamed into the store). */
async function upload(files: FilesService, lines: object[]) {
  const form = new FormData();
  form.append("purpose", "batch");
  form.append("file", new Blob([lines.map((l) => JSON.stringify(l)).join("\n") + "\n"]), "in.jsonl");
  const req = new Request("http://appliance.test/v1/files", { method: "POST", body: form });
  return files.upload(principal, req.body, req.headers.get("content-type"));
}

const line = (i: number, extra: object = {}) => ({ custom_id: `c${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "chat", n: i, ...extra } });

async function until<T>(what: string, get: () => Promise<T>, ok: (v: T) => boolean, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await get();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(v)}`);
    await Bun.sleep(50);
  }
}

async function text(files: FilesService, id: string | null) {
  if (!id) return [];
  const body = await files.content(principal, id);
  return (await new Response(body).text()).trim().split("\n").map((l) => JSON.parse(l));
}

test("two workers on one PostgreSQL store run a batch: each line once, results and errors written to the store", async () => {
  const ranA: string[] = [];
  const ranB: string[] = [];
  const a = processOn("proc-a", 30, ranA);
  const b = processOn("proc-b", 30, ranB);
  const input = await upload(a.files, [...Array.from({ length: 29 }, (_, i) => line(i + 1)), line(30, { fail: true })]);
  const created = await a.batches.create(principal, { input_file_id: input.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
  a.worker.start();
  b.worker.start();
  try {
    const done = await until("the batch to complete", () => b.batches.get(principal, created.id), (x) => x.status === "completed");
    expect(done.request_counts).toEqual({ total: 30, completed: 29, failed: 1 });
    expect(ranA.length).toBeGreaterThan(0);
    expect(ranB.length).toBeGreaterThan(0);
    expect(new Set([...ranA, ...ranB]).size).toBe(29);
    expect(ranA.length + ranB.length).toBe(29); // no line ran twice
    const out = await text(b.files, done.output_file_id);
    expect(out.map((o) => o.custom_id)).toEqual(Array.from({ length: 29 }, (_, i) => `c${i + 1}`));
    const errors = await text(a.files, done.error_file_id);
    expect(errors.map((e) => [e.custom_id, e.response.body.error.message])).toEqual([["c30", "this line asks to fail"]]);
    const [usage] = await pools[0]!.money`SELECT COUNT(*) AS n FROM usage WHERE request_id LIKE ${`req_${created.id.slice(6)}_%`}`;
    expect(Number(usage.n)).toBe(29);
    // Only one process published the result files.
    const [files] = await pools[0]!.money`SELECT COUNT(*) AS n FROM files WHERE purpose = 'batch_output' AND filename LIKE ${`${created.id}_%`}`;
    expect(Number(files.n)).toBe(2);
  } finally {
    await Promise.all([a.worker.stop(), b.worker.stop()]);
  }
}, 60_000);

test("a cancel fails the lines no process holds and the batch ends once nothing runs anywhere", async () => {
  const ran: string[] = [];
  const a = processOn("proc-c", 400, ran);
  const b = processOn("proc-d", 400, ran);
  const input = await upload(a.files, Array.from({ length: 40 }, (_, i) => line(i + 1)));
  const created = await a.batches.create(principal, { input_file_id: input.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
  a.worker.start();
  b.worker.start();
  try {
    await until("lines to run", async () => ran.length, (n) => n >= 2);
    await b.batches.cancel(principal, created.id);
    const done = await until("the batch to be cancelled", () => a.batches.get(principal, created.id), (x) => x.status === "cancelled");
    const { total, completed, failed } = done.request_counts;
    expect(total).toBe(40);
    expect(completed + failed).toBe(40);
    expect(completed).toBe(ran.length); // what ran was kept and charged; the rest failed as cancelled
    expect(completed).toBeLessThan(40);
    const errors = await text(a.files, done.error_file_id);
    expect(errors.length).toBe(failed);
    expect(errors.every((e) => e.error.code === "batch_cancelled")).toBe(true);
    const [pending] = await pools[0]!.money`SELECT COUNT(*) AS n FROM batch_lines WHERE batch_id = ${created.id} AND state = 'pending'`;
    expect(Number(pending.n)).toBe(0);
  } finally {
    await Promise.all([a.worker.stop(), b.worker.stop()]);
  }
}, 60_000);
