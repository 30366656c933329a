import { Database } from "bun:sqlite";
import { afterAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { ensureChatModel } from "../../models/cache";
import { tempDir } from "../helpers/app";
import { fileLines, uploadLines, waitForBatch } from "../helpers/batches";
import { CLI, untilListening } from "../helpers/cli";

// Issue 41 C2: a batch line that kills the process must not crash-loop the server. Here the
// "killer" is kill -9 itself, sent while the first line runs, twice: the line that was running during two
// deaths of the process is failed (batch_line_crashed) at the next start instead of being run a
// third time, the other lines complete, and the failed line is not charged.

const dir = tempDir();
const data = join(dir, "data");
const procs: Bun.Subprocess[] = [];
afterAll(async () => {
  for (const p of procs) p.kill("SIGKILL");
  await Promise.all(procs.map((p) => p.exited));
  if (!process.env.KEEP) rmSync(dir, { recursive: true, force: true });
  else console.log("kept", dir);
});

async function serve(config: string, dataDir = data) {
  const proc = Bun.spawn([process.execPath, CLI, "--config", config, "serve", "--port", "0"], {
    env: { ...process.env, HOME: dir, XDG_CONFIG_HOME: join(dir, "none"), APPLIANCE_DATA_DIR: dataDir },
    stdout: "pipe",
    stderr: "pipe",
  });
  procs.push(proc);
  const started = await untilListening(proc.stderr);
  // Read on, so that a full pipe never stalls the server; the log (stdout) is kept for the assertions.
  let log = "";
  void (async () => {
    for await (const chunk of proc.stdout) log += new TextDecoder().decode(chunk);
  })();
  void (async () => {
    for await (const _ of proc.stderr);
  })();
  return { proc, ...started, log: () => log };
}

/** The long line's starts (line 1) as the store has them (committed before the line runs). */
function startsOf(batchId: string, dataDir = data): number {
  return lineOf(batchId, dataDir)?.starts ?? 0;
}

function lineOf(batchId: string, dataDir: string) {
  const db = new Database(join(dataDir, "appliance.sqlite"), { readonly: true });
  try {
    return db.query<{ starts: number; state: string }, [string]>("SELECT starts, state FROM batch_lines WHERE batch_id = ? AND line = 1").get(batchId);
  } finally {
    db.close();
  }
}

async function until(what: string, ok: () => boolean, log: () => string, timeoutMs = 30_000) {
  const end = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; the server said:\n${log()}`);
    await Bun.sleep(50);
  }
}

async function writeConfig() {
  const config = join(dir, "config.toml");
  // slots = 2: batches take one slot at a time (spec §8), so the long line runs first and alone.
  writeFileSync(
    config,
    `[engines]\ndevice = "cpu"\nthreads = 1\n[bootstrap]\ncredit_usd = 5\n[[models]]\nid = "chat"\nname = "Tiny"\nkind = "chat"\nfiles = { model = "${await ensureChatModel("chat")}" }\nmax_context = 8192\nslots = 2\nload = "start"\n`,
  );
  return config;
}

const body = (i: number, maxTokens: number) => ({
  model: "chat",
  max_tokens: maxTokens,
  temperature: 0,
  chat_template_kwargs: { enable_thinking: false },
  messages: [{ role: "user", content: `line ${i}` }],
});

test("a line running during two deaths of the server is failed, not run a third time; the rest completes, uncharged for it", async () => {
  const config = await writeConfig();
  const lines = [
    { custom_id: "long", url: "/v1/chat/completions", body: body(0, 8000) }, // runs for many seconds
    ...[1, 2, 3].map((i) => ({ custom_id: `short${i}`, url: "/v1/chat/completions", body: body(i, 8) })),
  ];

  const first = await serve(config);
  const key = first.key!;
  const client = (url: string) => new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
  const c1 = client(first.url);
  const batch = await c1.batches.create({ input_file_id: await uploadLines(c1, lines), endpoint: "/v1/chat/completions", completion_window: "24h" });

  // First death: while the first line runs (its start is in the store).
  await until("the long line to start", () => startsOf(batch.id) === 1, first.log);
  await Bun.sleep(300);
  expect((await c1.batches.retrieve(batch.id)).request_counts!.completed).toBe(0);
  first.proc.kill("SIGKILL");
  await first.proc.exited;

  // Second death: the restarted server runs the long line again (alone), and dies again while it runs.
  const second = await serve(config);
  await until("the long line to start again", () => startsOf(batch.id) === 2, second.log);
  await Bun.sleep(300);
  expect((await client(second.url).batches.retrieve(batch.id)).request_counts!.completed).toBe(0);
  second.proc.kill("SIGKILL");
  await second.proc.exited;

  // Third start: the long line is failed without running, the others run, and the server stays up.
  const third = await serve(config);
  let done: OpenAI.Batch;
  try {
    const c3 = client(third.url);
    done = await waitForBatch(c3, batch.id, undefined, 30_000);
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: 4, completed: 3, failed: 1 });
    const errors = await fileLines(c3, done.error_file_id);
    expect(errors).toHaveLength(1);
    expect(errors[0].custom_id).toBe("long");
    expect(errors[0].response).toBeNull();
    expect(errors[0].error.code).toBe("batch_line_crashed");
    expect(errors[0].error.message).toContain("stopped while running this request twice");
    const out = await fileLines(c3, done.output_file_id);
    expect(out.map((l) => l.custom_id)).toEqual(["short1", "short2", "short3"]);
    expect(third.log()).toContain("the server stopped while running it twice");
    // Still serving.
    const live = await c3.chat.completions.create({ model: "chat", max_tokens: 2, messages: [{ role: "user", content: "still there?" }] });
    expect(live.choices).toHaveLength(1);
    expect(third.proc.exitCode).toBeNull();
  } finally {
    third.proc.kill("SIGTERM");
    await third.proc.exited;
  }

  // Nothing charged for the failed line: one usage row per completed line, the balance moved by their sum.
  const db = new Database(join(data, "appliance.sqlite"), { readonly: true });
  const tag = batch.id.slice(6);
  const rows = db.query<{ n: number; cost: number }, [string]>("SELECT COUNT(*) AS n, SUM(cost_micros) AS cost FROM usage WHERE request_id LIKE ?").get(`req_${tag}_%`)!;
  const long = db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM usage WHERE request_id = ?").get(`req_${tag}_1`)!;
  const account = db.query<{ balance_micros: number }, []>("SELECT balance_micros FROM accounts").get()!;
  const live = db.query<{ cost: number }, []>("SELECT COALESCE(SUM(cost_micros), 0) AS cost FROM usage WHERE batch = 0").get()!;
  db.close();
  expect(long.n).toBe(0);
  expect(rows.n).toBe(3);
  expect(account.balance_micros).toBe(5_000_000 - rows.cost - live.cost);
}, 90_000);

test("a graceful stop (SIGTERM) while a line runs is no crash: after two, the line still runs", async () => {
  const config = await writeConfig();
  const own = join(dir, "data-sigterm");
  const first = await serve(config, own);
  const c = new OpenAI({ apiKey: first.key!, baseURL: `${first.url}/v1`, maxRetries: 0 });
  const lines = [{ custom_id: "long", url: "/v1/chat/completions", body: body(0, 8000) }];
  const batch = await c.batches.create({ input_file_id: await uploadLines(c, lines), endpoint: "/v1/chat/completions", completion_window: "24h" });
  let server = first;
  for (const round of [1, 2]) {
    await until(`the line to start (round ${round})`, () => startsOf(batch.id, own) === 1, server.log);
    server.proc.kill("SIGTERM");
    expect(await server.proc.exited).toBe(0);
    expect(lineOf(batch.id, own)).toEqual({ starts: 0, state: "pending" }); // its start handed back
    server = await serve(config, own);
  }
  try {
    await until("the line to start a third time", () => startsOf(batch.id, own) === 1, server.log);
    expect(lineOf(batch.id, own)!.state).toBe("pending"); // running, not failed
    expect(server.log()).not.toContain("the server stopped while running it"); // neither a suspect nor failed
  } finally {
    server.proc.kill("SIGKILL");
    await server.proc.exited;
  }
}, 60_000);
