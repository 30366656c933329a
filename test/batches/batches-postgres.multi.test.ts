import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { postgresBatchStore } from "../../src/4-store/pg/batches";
import { connectPostgres, migratePostgres, type PgPools } from "../../src/4-store/pg/db";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: batch line claims across processes on one PostgreSQL store. Three separate Bun
// processes (test/fixtures/batches/claim-loop.ts) claim lines of one batch of 300 through the batch
// store and settle each through the PostgreSQL ledger with its batch_line effect (each settlement
// sent twice): every line ends exactly once and each request id is charged once. Then one of them
// is killed with SIGKILL while it holds leased lines: the others claim those lines again once the
// lease (2 s here) lapses, and they are still charged once.

const FIXTURE = join(import.meta.dir, "../fixtures/batches/claim-loop.ts");
const LINES = 300;
const LEASE_MS = 2000;
const COST = 1_000;
const CREDIT = 10_000_000;

let url: string;
let pools: PgPools;
const procs: Bun.Subprocess[] = [];

beforeAll(async () => {
  url = await freshDatabase("batchmulti");
  pools = connectPostgres(url);
  await migratePostgres(pools.money);
  await pools.money`INSERT INTO accounts (id, name, balance_micros, created_at) VALUES ('acct_m', 'm', ${CREDIT}, 1)`;
  await pools.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_m', 'acct_m', 'premium', ${new Uint8Array(Buffer.from("secret m"))}, 'abcd', 1)`;
  await pools.money`INSERT INTO files (id, key_id, account_id, filename, purpose, bytes, created_at) VALUES ('file-m', 'key_m', 'acct_m', 'in.jsonl', 'batch', 10, 1)`;
});

afterAll(async () => {
  for (const p of procs) p.kill("SIGKILL");
  await Promise.all(procs.map((p) => p.exited));
  await pools?.close();
});

async function batchOf(id: string) {
  const store = postgresBatchStore(pools.money, pools.fast);
  await store.insert({ id, key_id: "key_m", account_id: "acct_m", endpoint: "/v1/chat/completions", input_file_id: "file-m", completion_window: "24h", metadata: null, created_at: Date.now(), expires_at: Date.now() + 86_400_000 });
  const lines = Array.from({ length: LINES }, (_, i) => ({ line: i + 1, custom_id: `c${i + 1}`, model: "chat", body: "{}" }));
  expect(await store.begin(id, lines, Date.now())).toBe(true);
}

interface Worker {
  proc: Bun.Subprocess<"ignore", "pipe", "pipe">;
  owner: string;
  /** What it printed, one JSON value a line, as it comes. */
  said: any[];
  /** Called with each value it prints. */
  onSay?: (v: any) => void;
  ended: Promise<void>;
}

function worker(batchId: string, owner: string): Worker {
  const proc = Bun.spawn([process.execPath, FIXTURE, url, batchId, owner, String(LEASE_MS)], { stdout: "pipe", stderr: "pipe" });
  procs.push(proc);
  const w: Worker = { proc, owner, said: [], ended: Promise.resolve() };
  w.ended = (async () => {
    let rest = "";
    for await (const chunk of proc.stdout) {
      rest += new TextDecoder().decode(chunk);
      let i;
      while ((i = rest.indexOf("\n")) >= 0) {
        const v = JSON.parse(rest.slice(0, i));
        rest = rest.slice(i + 1);
        w.said.push(v);
        w.onSay?.(v);
      }
    }
  })();
  void (async () => {
    for await (const _ of proc.stderr);
  })();
  return w;
}

async function outcome(batchId: string) {
  const tag = batchId.slice(6);
  const lines = await pools.money`SELECT line, state, starts, result FROM batch_lines WHERE batch_id = ${batchId} ORDER BY line`;
  const [usage] = await pools.money`SELECT COUNT(*) AS n, COUNT(DISTINCT request_id) AS ids, COALESCE(SUM(cost_micros), 0) AS cost FROM usage WHERE request_id LIKE ${`req_${tag}_%`}`;
  const [b] = await pools.money`SELECT completed, failed, total FROM batches WHERE id = ${batchId}`;
  const rows: { line: number; state: string; starts: number; by: string | null }[] = lines.map((l: { line: string; state: string; starts: string; result: string | null }) => ({
    line: Number(l.line),
    state: l.state,
    starts: Number(l.starts),
    by: l.result ? (JSON.parse(l.result).by as string) : null,
  }));
  return {
    lines: rows,
    usage: { n: Number(usage.n), ids: Number(usage.ids), cost: Number(usage.cost) },
    counts: [Number(b.completed), Number(b.failed), Number(b.total)],
  };
}

const balance = async () => Number((await pools.money`SELECT balance_micros FROM accounts WHERE id = 'acct_m'`)[0].balance_micros);

test("three processes claim and settle one batch: every line ends once, each request id charged once", async () => {
  const id = "batch_multi1";
  await batchOf(id);
  const before = await balance();
  const workers = ["proc-a", "proc-b", "proc-c"].map((o) => worker(id, o));
  expect(await Promise.all(workers.map((w) => w.proc.exited))).toEqual([0, 0, 0]);
  await Promise.all(workers.map((w) => w.ended));
  const out = await outcome(id);
  expect(out.counts).toEqual([LINES, 0, LINES]);
  expect(out.lines.every((l) => l.state === "completed" && l.starts === 1)).toBe(true); // no line claimed twice
  expect(out.usage).toEqual({ n: LINES, ids: LINES, cost: LINES * COST });
  expect(await balance()).toBe(before - LINES * COST);
  // every process took part, and each settlement's retry charged nothing
  const settled = workers.map((w) => w.said.filter((v) => "settled" in v));
  for (const s of settled) expect(s.length).toBeGreaterThan(0);
  expect(settled.flat().map((v) => v.settled).sort((a, b) => a - b)).toEqual(Array.from({ length: LINES }, (_, i) => i + 1));
  expect(settled.flat().every((v) => v.first.charged === true && v.second.charged === false)).toBe(true);
}, 60_000);

test("a process killed with SIGKILL holding lines: the others claim them once its leases lapse, each still charged once", async () => {
  const id = "batch_multi2";
  await batchOf(id);
  const before = await balance();
  const [victim, ...others] = ["proc-x", "proc-y", "proc-z"].map((o) => worker(id, o));
  // Killed right after its second claim: its runs take 100–250 ms, so it dies holding those lines.
  const killed = new Promise<void>((resolve) => {
    let claims = 0;
    victim!.onSay = (v) => {
      if ("claimed" in v && ++claims === 2) {
        victim!.proc.kill("SIGKILL");
        resolve();
      }
    };
  });
  await killed;
  expect(await victim!.proc.exited).not.toBe(0);
  await victim!.ended;
  const settledByVictim = new Set(victim!.said.filter((v) => "settled" in v).map((v) => v.settled as number));
  const held = victim!.said.filter((v) => "claimed" in v).flatMap((v) => (v.claimed as [number, number][]).map(([line]) => line)).filter((l) => !settledByVictim.has(l));
  expect(held.length).toBeGreaterThan(0);

  expect(await Promise.all(others.map((w) => w.proc.exited))).toEqual([0, 0]);
  await Promise.all(others.map((w) => w.ended));
  const out = await outcome(id);
  expect(out.counts).toEqual([LINES, 0, LINES]);
  expect(out.lines.every((l) => l.state === "completed")).toBe(true);
  expect(out.usage).toEqual({ n: LINES, ids: LINES, cost: LINES * COST });
  expect(await balance()).toBe(before - LINES * COST);
  // What the victim held was claimed again (a second start) and finished by another process —
  // unless it settled a line in its last moment, after its last word.
  const byLine = new Map(out.lines.map((l) => [l.line, l]));
  const reclaimed = held.filter((l) => byLine.get(l)!.starts >= 2 && byLine.get(l)!.by !== victim!.owner);
  for (const l of held) expect(reclaimed.includes(l) || byLine.get(l)!.by === victim!.owner).toBe(true);
  expect(reclaimed.length).toBeGreaterThan(0);
  // Lines nobody held when it died were claimed once.
  expect(out.lines.filter((l) => !held.includes(l.line)).every((l) => l.starts === 1)).toBe(true);
}, 60_000);
