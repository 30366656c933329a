import { afterAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { ensureChatModel } from "../../models/cache";
import { tempDir } from "../helpers/app";
import { fileLines, uploadLines, waitForBatch } from "../helpers/batches";
import { CLI, untilListening } from "../helpers/cli";

// Durability (issue "files and batches"): the server is killed (SIGKILL) in the middle of a
// batch and started again on the same data dir; the batch completes with exactly one result per
// line, each line charged once.

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function serve(config: string) {
  const proc = Bun.spawn([process.execPath, CLI, "--config", config, "serve", "--port", "0"], {
    env: { ...process.env, HOME: dir, XDG_CONFIG_HOME: join(dir, "none"), APPLIANCE_DATA_DIR: join(dir, "data") },
    stdout: "ignore",
    stderr: "pipe",
  });
  return { proc, ...(await untilListening(proc.stderr)) };
}

test("a batch survives a killed server: one result per line, each charged once", async () => {
  const config = join(dir, "config.toml");
  writeFileSync(
    config,
    `[engines]\ndevice = "cpu"\nthreads = 1\n[bootstrap]\ncredit_usd = 5\n[[models]]\nid = "chat"\nname = "Tiny"\nkind = "chat"\nfiles = { model = "${await ensureChatModel("chat")}" }\nmax_context = 2048\nslots = 2\nload = "start"\n`,
  );
  const first = await serve(config);
  const key = first.key!;
  const client = (url: string) => new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
  const lines = Array.from({ length: 16 }, (_, i) => ({
    custom_id: `k${i}`,
    url: "/v1/chat/completions",
    body: { model: "chat", max_tokens: 120, temperature: 0, chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: `line ${i}` }] },
  }));
  const c1 = client(first.url);
  const batch = await c1.batches.create({ input_file_id: await uploadLines(c1, lines), endpoint: "/v1/chat/completions", completion_window: "24h" });
  const midway = await waitForBatch(c1, batch.id, (b) => b.request_counts!.completed >= 3);
  first.proc.kill("SIGKILL");
  expect(midway.request_counts!.completed).toBeLessThan(16); // killed with lines still to run
  await first.proc.exited;

  const second = await serve(config);
  try {
    expect(second.key).toBeUndefined(); // same data dir: no new bootstrap
    const c2 = client(second.url);
    const done = await waitForBatch(c2, batch.id);
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: 16, completed: 16, failed: 0 });
    const out = await fileLines(c2, done.output_file_id);
    expect(out.map((l) => l.custom_id)).toEqual(lines.map((l) => l.custom_id));
    expect(new Set(out.map((l) => l.response.request_id)).size).toBe(16);
  } finally {
    second.proc.kill("SIGTERM");
    await second.proc.exited;
  }
  // Charged once per line: one usage row each, and the balance moved by exactly their sum.
  const { openStore } = await import("../../src/4-store/db");
  const db = openStore(join(dir, "data"));
  const rows = db.query<{ n: number; cost: number }, [string]>("SELECT COUNT(*) AS n, SUM(cost_micros) AS cost FROM usage WHERE request_id LIKE ?").get(`req_${batch.id.slice(6)}_%`)!;
  const account = db.query<{ balance_micros: number }, []>("SELECT balance_micros FROM accounts").get()!;
  db.close();
  expect(rows.n).toBe(16);
  expect(account.balance_micros).toBe(5_000_000 - rows.cost);
}, 120_000);
