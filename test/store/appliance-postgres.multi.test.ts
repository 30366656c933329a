import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { SIGNIN_FAILURES_PER_ADDRESS } from "../../src/2-services/console/throttle";
import { HOLD_LEASE_MS } from "../../src/4-store/pg/holds";
import { tempDir } from "../helpers/app";
import { CLI, cli, serveCli } from "../helpers/cli";
import { freshDatabase, nodeEnv } from "../helpers/postgres";

// Issue 44: three real appliance processes on one PostgreSQL are one appliance for money, limits,
// keys and sign-ins. Everything is set up through the CLI against the same database (the CLI works
// on the configured store), and checked in the database itself afterwards:
// - 900 concurrent billed requests over 6 keys near small balances: each account's balance is its
//   credit minus its usage to the µ$, never below one request's reservation, each request id charged once;
// - a key's requests per minute and requests in flight are exact across the three;
// - a process killed with -9 while holding credit: what it held goes back to the account (the
//   survivors spend the balance down), and only settled requests are charged;
// - 60 wrong sign-ins at once across the three check no more passwords than the budget;
// - a key revoked by the CLI is refused by all three within 1 s.

const PRICE_PER_M = 1000; // $ per million input tokens: one token costs 1000 µ$
const dirs: string[] = [];
const children: Subprocess[] = [];
let url = "";
let sql: SQL;
let servers: { url: string; child: Subprocess; pid: number }[] = [];
let configPath = "";

afterAll(async () => {
  for (const c of children) c.kill("SIGKILL");
  await sql?.close();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

const env = () => ({ APPLIANCE_CONFIG: configPath, ...nodeEnv(url) });
const admin = (args: string[]) => {
  const dir = tempDir("appliance-multi-cli-");
  dirs.push(dir);
  const r = cli(dir, args, env());
  if (r.code !== 0) throw new Error(`appliance ${args.join(" ")} failed: ${r.stderr}`);
  return r;
};
/** The CLI with one line on its stdin (a password). */
const adminWithInput = (args: string[], stdin: string) => {
  const dir = tempDir("appliance-multi-cli-");
  dirs.push(dir);
  const r = Bun.spawnSync([process.execPath, CLI, ...args], { env: { PATH: process.env.PATH ?? "", HOME: dir, XDG_CONFIG_HOME: join(dir, "x"), APPLIANCE_DATA_DIR: dir, ...env() }, stdin: Buffer.from(stdin), stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`appliance ${args.join(" ")} failed: ${r.stderr}`);
  return r;
};
const newKey = (account: string, extra: string[] = []) => {
  const made = admin(["keys", "create", "--account", account, "--premium", "--json", ...extra]).json<{ key: string; id: string }>();
  return { key: made.key, info: { id: made.id } };
};

function embed(server: string, key: string, input: string | string[]) {
  return fetch(`${server}/v1/embeddings`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "embed", input }),
  });
}

/** Runs `jobs` with at most `width` at once; the results in order. */
async function pool<T>(jobs: (() => Promise<T>)[], width: number): Promise<T[]> {
  const out: T[] = new Array(jobs.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < jobs.length) {
        const i = next++;
        out[i] = await jobs[i]!();
      }
    }),
  );
  return out;
}

beforeAll(async () => {
  url = await freshDatabase("appliance_multi");
  sql = new SQL({ url, max: 2 });
  const base = tempDir("appliance-multi-");
  dirs.push(base);
  const model = await ensureOnnxModel("embed");
  configPath = join(base, "config.toml");
  writeFileSync(
    configPath,
    [
      "[engines]",
      'device = "cpu"',
      "threads = 1",
      "[prices]",
      `embedding_input_per_m = ${PRICE_PER_M}`,
      "[[models]]",
      'id = "embed"',
      'name = "Tiny embed"',
      'kind = "embedding"',
      "max_context = 512",
      'load = "start"',
      `files = { model = ${JSON.stringify(model)} }`,
      "",
    ].join("\n"),
  );
  admin(["store", "migrate"]);
  for (const a of ["team1", "team2", "team3"]) admin(["accounts", "create", a, "--credit", "0.5"]);
  admin(["accounts", "create", "limits", "--credit", "100"]);
  admin(["accounts", "create", "signin"]);
  adminWithInput(["accounts", "password", "signin"], "the-right-password-123\n");
  servers = await Promise.all(
    [0, 1, 2].map(async (i) => {
      const dir = tempDir(`appliance-multi-${i}-`);
      dirs.push(dir);
      const s = await serveCli(dir, ["--port", "0"], env());
      children.push(s.child);
      return { url: s.url, child: s.child, pid: s.child.pid };
    }),
  );
}, 240_000);

describe("three appliance processes on one PostgreSQL", () => {
  test("900 concurrent billed requests over 6 keys near small balances: exact to the µ$, overdraft at most one reservation, each request id charged once", async () => {
    const keys = ["team1", "team1", "team2", "team2", "team3", "team3"].map((a) => newKey(a).key);
    const jobs = Array.from({ length: 900 }, (_, i) => async () => {
      const r = await embed(servers[i % 3]!.url, keys[i % 6]!, `request ${i % 7} of the run`);
      const body = (await r.json()) as { usage?: { prompt_tokens: number }; error?: { code: string } };
      return { status: r.status, code: body.error?.code, tokens: body.usage?.prompt_tokens ?? 0, id: r.headers.get("x-request-id") };
    });
    const results = await pool(jobs, 45);
    const statuses = new Set(results.map((r) => r.status));
    expect([...statuses].sort()).toEqual([200, 402]); // answered or refused for the balance; nothing else
    expect(new Set(results.filter((r) => r.status === 402).map((r) => r.code))).toEqual(new Set(["insufficient_balance"]));
    const served = results.filter((r) => r.status === 200);
    const largest = Math.max(...served.map((r) => r.tokens)) * PRICE_PER_M;

    const rows = await sql`SELECT a.name, a.balance_micros,
        (SELECT COALESCE(SUM(amount_micros), 0) FROM credits c WHERE c.account_id = a.id) AS credit,
        (SELECT COALESCE(SUM(cost_micros), 0) FROM usage u WHERE u.account_id = a.id) AS spent,
        (SELECT COUNT(*) FROM usage u WHERE u.account_id = a.id) AS n,
        (SELECT COUNT(DISTINCT request_id) FROM usage u WHERE u.account_id = a.id) AS ids
      FROM accounts a WHERE a.name LIKE 'team%' ORDER BY a.name`;
    let charged = 0;
    for (const r of rows) {
      expect(Number(r.balance_micros)).toBe(Number(r.credit) - Number(r.spent));
      expect(Number(r.balance_micros)).toBeGreaterThanOrEqual(-largest);
      expect(Number(r.balance_micros)).toBeLessThan(largest); // near zero: the balance was the limit
      expect(Number(r.ids)).toBe(Number(r.n));
      charged += Number(r.n);
    }
    expect(charged).toBe(served.length);
    // Every answered request's id has its one usage row.
    const ids = served.map((r) => r.id!);
    const [{ n }] = await sql`SELECT COUNT(*) AS n FROM usage WHERE request_id IN ${sql(ids)}`;
    expect(Number(n)).toBe(ids.length);
    // What each process held goes back once it is idle (its heartbeat): then nothing is held.
    const t0 = Date.now();
    while (Number((await sql`SELECT COUNT(*) AS n FROM credit_holds`)[0].n) > 0) {
      if (Date.now() - t0 > 15_000) throw new Error("credit is still held 15 s after the last request");
      await Bun.sleep(200);
    }
  }, 180_000);

  test("a key's requests per minute are exact across the three", async () => {
    const { key } = newKey("limits", ["--rpm", "20"]);
    const results = await Promise.all(Array.from({ length: 60 }, (_, i) => embed(servers[i % 3]!.url, key, "rate").then((r) => r.status)));
    expect(results.filter((s) => s === 200)).toHaveLength(20);
    expect(results.filter((s) => s === 429)).toHaveLength(40);
  }, 60_000);

  test("a key's requests in flight never pass its cap, in the database every process admits by", async () => {
    const { key, info } = newKey("limits", ["--inflight", "2"]);
    // ~450 tokens: inside the model's 512, long enough to overlap
    const long = Array.from({ length: 75 }, (_, i) => `word${i}`).join(" ");
    let most = 0;
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const [{ n }] = await sql`SELECT COUNT(*) AS n FROM counted_leases WHERE key = ${`inflight:${info.id}`}`;
        most = Math.max(most, Number(n));
      }
    })();
    const statuses = await Promise.all(Array.from({ length: 30 }, (_, i) => embed(servers[i % 3]!.url, key, long).then((r) => r.status)));
    polling = false;
    await poller;
    expect(most).toBeLessThanOrEqual(2);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThan(0);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0); // it was contended
    expect(statuses.every((s) => s === 200 || s === 429)).toBe(true);
  }, 60_000);

  test("a key with one request in flight, sent one after another: none is refused, its place is free before each answer", async () => {
    const { key } = newKey("limits", ["--inflight", "1"]);
    const statuses: number[] = [];
    for (let i = 0; i < 40; i++) statuses.push((await embed(servers[0]!.url, key, `one at a time ${i}`)).status);
    expect(statuses).toEqual(Array(40).fill(200));
  }, 60_000);

  test("60 wrong sign-ins at once across the three check no more passwords than the budget", async () => {
    const statuses = await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        fetch(`${servers[i % 3]!.url}/console/api/login`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ account: "signin", password: `wrong-password-${i}` }),
        }).then((r) => r.status),
      ),
    );
    const checked = statuses.filter((s) => s === 401).length;
    expect(checked).toBeGreaterThan(0);
    expect(checked).toBeLessThanOrEqual(SIGNIN_FAILURES_PER_ADDRESS);
    expect(statuses.filter((s) => s === 429).length).toBe(60 - checked);
  }, 60_000);

  test("a key revoked by the CLI is refused by every process within 1 s", async () => {
    const { key, info } = newKey("limits");
    for (const s of servers) expect((await fetch(`${s.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
    admin(["keys", "revoke", info.id]);
    const revokedAt = performance.now();
    const took = await Promise.all(
      servers.map(async (s) => {
        while ((await fetch(`${s.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status !== 401) {
          if (performance.now() - revokedAt > 5000) throw new Error(`${s.url} still accepts the revoked key`);
          await Bun.sleep(20);
        }
        return performance.now() - revokedAt;
      }),
    );
    for (const ms of took) expect(ms).toBeLessThan(1000);
  }, 30_000);

  test("each process is a node: `appliance nodes` lists the three with their models; a drained node answers new work 503 until taken back, and still reads and cancels", async () => {
    const list = () => admin(["nodes", "--json"]).json<{ data: { id: string; url: string; state: string; models: { id: string }[] }[] }>().data;
    const nodes = list();
    expect(nodes.map((n) => n.url).sort()).toEqual(servers.map((s) => s.url).sort());
    expect(nodes.every((n) => n.state === "serving" && n.models.map((m) => m.id).join() === "embed")).toBe(true);
    const target = nodes.find((n) => n.url === servers[1]!.url)!;
    admin(["nodes", "drain", target.id]);
    const { key } = newKey("limits");
    const until = async (status: number) => {
      const t0 = Date.now();
      for (;;) {
        const health = await fetch(`${servers[1]!.url}/health`);
        if (health.status === status) return health;
        if (Date.now() - t0 > 10_000) throw new Error(`/health stayed ${health.status}`);
        await Bun.sleep(100);
      }
    };
    expect(await (await until(503)).json()).toMatchObject({ status: "draining", node: target.id });
    const refused = await embed(servers[1]!.url, key, "drained");
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("node_not_serving");
    // What starts no work is still answered there: reads, and ending what it has (a cancel, a rental's stop).
    const auth = { authorization: `Bearer ${key}` };
    expect((await fetch(`${servers[1]!.url}/v1/models`, { headers: auth })).status).toBe(200);
    const cancel = await fetch(`${servers[1]!.url}/v1/batches/batch_none/cancel`, { method: "POST", headers: auth });
    expect(((await cancel.json()) as { error: { code: string } }).error.code).toBe("not_found");
    expect((await embed(servers[0]!.url, key, "elsewhere")).status).toBe(200); // the others serve
    expect(list().find((n) => n.id === target.id)!.state).toBe("draining");
    admin(["nodes", "drain", target.id, "--undo"]);
    await until(200);
    expect((await embed(servers[1]!.url, key, "back")).status).toBe(200);
  }, 60_000);

  test("a node whose prices differ from the cluster's refuses to start, naming the field", async () => {
    const dir = tempDir("appliance-multi-odd-");
    dirs.push(dir);
    const odd = join(dir, "config.toml");
    writeFileSync(odd, readFileSync(configPath, "utf8").replace(`embedding_input_per_m = ${PRICE_PER_M}`, `embedding_input_per_m = ${PRICE_PER_M * 2}`));
    const r = cli(dir, ["serve", "--port", "0"], { APPLIANCE_CONFIG: odd, ...nodeEnv(url) });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("prices.embedding_input_per_m");
  }, 60_000);

  test("a process killed with -9 while holding credit: what it held goes back to the account, and only answered requests are charged", async () => {
    // An account whose balance the victim's requests in flight hold nearly all of.
    admin(["accounts", "create", "victim", "--credit", "200"]); // about 55 of these requests ($3.6 each)
    const { key } = newKey("victim");
    const victim = servers[2]!;
    const long = Array(8).fill(Array.from({ length: 75 }, (_, i) => `token${i}`).join(" "));
    const answered: number[] = [];
    const inFlight = Array.from({ length: 24 }, () =>
      embed(victim.url, key, long)
        .then((r) => answered.push(r.status))
        .catch(() => null),
    );
    const victimHolds = async () => Number((await sql`SELECT COALESCE(SUM(micros), 0) AS m FROM credit_holds WHERE owner LIKE ${`%:${victim.pid}:%`}`)[0].m);
    for (let i = 0; i < 500 && (await victimHolds()) === 0; i++) await Bun.sleep(5);
    expect(await victimHolds()).toBeGreaterThan(0);
    victim.child.kill("SIGKILL");
    await Promise.all(inFlight);
    const t0 = Date.now();
    while (Number((await sql`SELECT COUNT(*) AS n FROM credit_holds WHERE owner LIKE ${`%:${victim.pid}:%`}`)[0].n) > 0) {
      if (Date.now() - t0 > HOLD_LEASE_MS + 15_000) throw new Error("the killed process's holds were never released");
      await Bun.sleep(250);
    }
    // Charged: only what was settled, each with its row; a hold is never a charge.
    const ledgerOf = async () =>
      (await sql`SELECT a.balance_micros AS b, (SELECT SUM(amount_micros) FROM credits WHERE account_id = a.id) AS credit,
        (SELECT COALESCE(SUM(cost_micros), 0) FROM usage WHERE account_id = a.id) AS spent, (SELECT COUNT(*) FROM usage WHERE account_id = a.id) AS n
        FROM accounts a WHERE name = 'victim'`)[0];
    const after = await ledgerOf();
    expect(Number(after.b)).toBe(Number(after.credit) - Number(after.spent));
    expect(Number(after.n)).toBeGreaterThanOrEqual(answered.filter((s) => s === 200).length);
    // What the victim held is the account's again: the survivors spend the balance down to its last request.
    let statuses: number[] = [];
    do statuses = await Promise.all([0, 1].map((i) => embed(servers[i]!.url, key, long).then((r) => r.status)));
    while (statuses.every((s) => s === 200));
    expect(statuses.every((s) => s === 200 || s === 402)).toBe(true);
    const end = await ledgerOf();
    const [{ m: oneRequest }] = await sql`SELECT MAX(cost_micros) AS m FROM usage WHERE account_id = (SELECT id FROM accounts WHERE name = 'victim')`;
    expect(Number(end.b)).toBe(Number(end.credit) - Number(end.spent));
    expect(Number(end.b)).toBeLessThan(Number(oneRequest) * 3); // nothing is left held away by the dead process
  }, 90_000);
});
