import { afterAll, beforeAll, expect, test } from "bun:test";
import type OpenAI from "openai";
import { runLine } from "../../src/2-services/batches/run-line";
import { batchLanes } from "../../src/1-api/batch-lanes";
import { batchesRepo, sqliteBatchStore } from "../../src/4-store/batches";
import type { TestApp } from "../helpers/app";
import { fileLines, uploadLines } from "../helpers/batches";
import { chatTestApp } from "../helpers/chat";

// Issue 41 C2, inside one process: a line a dead process was running (starts > 0 in the store) runs
// alone; one it was running during two deaths is failed, uncharged; a graceful stop hands a start
// back; and a line that another path ended while it ran is not charged for its answer.

let t: TestApp & { openai: (key: string) => OpenAI };
let client: OpenAI;
beforeAll(async () => {
  t = await chatTestApp({ slots: 3 }); // batches may use 2 slots at once
  client = t.openai(await t.key({ account: "suspects", creditUsd: 5 }));
});
afterAll(() => t.close());

const repo = () => batchesRepo(t.deps.db!);

/** A batch in progress with `n` chat lines, as the worker's validation leaves it, without starting the worker. */
async function batchOf(n: number, maxTokens: number) {
  const lines = Array.from({ length: n }, (_, i) => ({
    custom_id: `l${i + 1}`,
    url: "/v1/chat/completions",
    body: { model: "chat", max_tokens: maxTokens, temperature: 0, chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: `line ${i + 1}` }] },
  }));
  const b = await client.batches.create({ input_file_id: await uploadLines(client, lines), endpoint: "/v1/chat/completions", completion_window: "24h" });
  repo().insertLines(b.id, lines.map((l, i) => ({ line: i + 1, custom_id: l.custom_id, model: "chat", body: JSON.stringify(l.body) })));
  repo().setStatus(b.id, "in_progress", Date.now(), { total: n });
  return b.id;
}

const setStarts = (batch: string, line: number, starts: number) =>
  t.deps.db!.query("UPDATE batch_lines SET starts = ? WHERE batch_id = ? AND line = ?").run(starts, batch, line);
const usageOf = (batch: string, line: number) =>
  t.deps.db!.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM usage WHERE request_id = ?").get(`req_${batch.slice(6)}_${line}`)!.n;

test("lines a dead process was running run one at a time; one it was running twice is failed, uncharged", async () => {
  const id = await batchOf(6, 40);
  // As a process killed twice would leave them: lines 1 and 3 were running at its last death, line 2 at both.
  setStarts(id, 1, 1);
  setStarts(id, 2, 2);
  setStarts(id, 3, 1);
  let maxWhileSuspects = 0;
  const sample = setInterval(() => {
    const pending = (n: number) => repo().line(id, n)!.state === "pending";
    const n = t.deps.batchWorker.running();
    if (pending(1) || pending(3)) maxWhileSuspects = Math.max(maxWhileSuspects, n);
  }, 2);
  t.deps.batchWorker.start();
  try {
    for (;;) {
      const b = repo().byId(id)!;
      if (b.status === "completed") break;
      await Bun.sleep(20);
    }
  } finally {
    clearInterval(sample);
    await t.deps.batchWorker.stop();
  }
  const b = await client.batches.retrieve(id);
  expect(b.request_counts).toEqual({ total: 6, completed: 5, failed: 1 });
  expect(maxWhileSuspects).toBe(1); // a suspect runs with no other batch line beside it
  const errors = await fileLines(client, b.error_file_id);
  expect(errors.map((e) => [e.custom_id, e.error.code])).toEqual([["l2", "batch_line_crashed"]]);
  expect(usageOf(id, 2)).toBe(0);
  for (const n of [1, 3, 4, 5, 6]) expect(usageOf(id, n)).toBe(1);
  expect(t.logs.some((l) => l.msg === "batch line runs alone: the server stopped while running it" && l.line === 3)).toBe(true);
}, 60_000);

test("a graceful stop hands the running lines' starts back: stopping is no crash", async () => {
  const id = await batchOf(2, 3000);
  t.deps.batchWorker.start();
  try {
    while (repo().line(id, 1)!.starts === 0) await Bun.sleep(10);
    expect(t.deps.batchWorker.running()).toBeGreaterThan(0);
  } finally {
    await t.deps.batchWorker.stop();
  }
  const line = repo().line(id, 1)!;
  expect(line.state).toBe("pending");
  expect(line.starts).toBe(0);
  expect(repo().started().filter((l) => l.batch_id === id)).toEqual([]);
  await client.batches.cancel(id);
}, 60_000);

test("a line that another path ended while it ran is not charged for its answer, nor counted twice", async () => {
  const id = await batchOf(1, 8);
  const batch = repo().byId(id)!;
  const line = repo().line(id, 1)!;
  const principal = (await t.deps.accounts.principalById(batch.key_id))!;
  const balance = () => t.deps.db!.query<{ b: number }, [string]>("SELECT balance_micros AS b FROM accounts WHERE id = ?").get(batch.account_id)!.b;
  const before = balance();
  // Ended elsewhere first (as the crash path or a cancel would), then its run finishes.
  expect(repo().fail(id, 1, JSON.stringify({ ended: "elsewhere" }), Date.now())).toBe(true);
  const deps = { repo: sqliteBatchStore(t.deps.db!), lanes: batchLanes({ chat: t.deps.chat, embeddings: t.deps.embeddings, decisions: t.deps.decisions, rerank: t.deps.rerank }), clock: t.deps.clock, logger: t.deps.logger };
  expect(await runLine(deps, batch, line, principal, new AbortController().signal)).toBe("done");
  expect(usageOf(id, 1)).toBe(0);
  expect(balance()).toBe(before);
  const after = repo().byId(id)!;
  expect([after.completed, after.failed]).toEqual([0, 1]);
  expect(repo().line(id, 1)!.result).toBe(JSON.stringify({ ended: "elsewhere" }));
  expect(t.logs.some((l) => l.msg === "batch line ended elsewhere while it ran; its answer is dropped, uncharged")).toBe(true);
}, 60_000);
