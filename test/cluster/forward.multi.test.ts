import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI, { toFile } from "openai";
import { ensureChatModel } from "../../models/cache";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { ensureDiffusionModel } from "../../models/diffusion/cache";
import { SPECIAL_TOKENS } from "../../models/gguf/bpe";
import { HOLD_LEASE_MS } from "../../src/4-store/pg/holds";
import { tempDir } from "../helpers/app";
import { cli, CLI } from "../helpers/cli";
import { serveNode, type ServedNode } from "../helpers/nodes";
import { startHaproxy } from "../helpers/haproxy";
import { CLUSTER_SECRET, freshDatabase, nodeEnv } from "../helpers/postgres";
import { bodyHashOf, HOP_HEADER, signHop } from "../../src/2-services/cluster/hop";

// Issue 45: three real appliance processes on one PostgreSQL, each serving other models, are one
// appliance — any node answers for every model (forwarding one hop, signed), bills once, limits once:
// - node 1 serves embed-1; node 2 chat-2 and chat-x; node 3 chat-3 and chat-x (the generated chat
//   GGUF and embedding ONNX files under those ids);
// - the model list is the same on every node;
// - node 3's model asked at node 1 streams intact in all three chat formats, one usage row each;
// - a console session at node 1 chats with node 3's model through its account's console key (issue 48);
// - 60 mixed concurrent requests at all three: the ledger exact and a key's rpm exact;
// - a key revoked by the CLI is refused on every node within 1 s, forwarded or not;
// - a stream through node 1 from node 2, node 2 killed: the format's error event, nothing billed, holds released;
// - a 120-line batch of chat-x, node 2 killed a quarter through: every line once, usage = completed lines;
// - a hop that is unsigned, forged, stale or replayed is refused by a real node, in the endpoint's format;
// - HAProxy in front of the three, node 3 killed under streams: only the streams node 3 served fail.

const PRICE = 1000; // $ per million tokens: one token costs 1000 µ$
const dirs: string[] = [];
let url = "";
let sql: SQL;
let chatFile = "";
let embedFile = "";
let nliFile = "";
let turboFile = "";
/** A logit bias that keeps the random model from ending a long stream early (its special tokens barred). */
let noEnd: Record<string, number> = {};
let key = "";
const nodes: ServedNode[] = [];

const MODELS: Record<number, [string, "chat" | "embed" | "nli" | "image"][]> = {
  0: [
    ["embed-1", "embed"],
    ["nli-1", "nli"],
    ["turbo-1", "image"],
  ],
  1: [
    ["chat-2", "chat"],
    ["chat-x", "chat"],
  ],
  2: [
    ["chat-3", "chat"],
    ["chat-x", "chat"],
  ],
};

function configFor(dir: string, i: number): string {
  const path = join(dir, "config.toml");
  const lines = ["[engines]", 'device = "cpu"', "threads = 1", "[rentals]", "discover = false", "[prices]", `chat_input_per_m = ${PRICE}`, `chat_output_per_m = ${PRICE}`, `embedding_input_per_m = ${PRICE}`];
  const as = { chat: ["chat", chatFile, 4096], embed: ["embedding", embedFile, 512], nli: ["classifier", nliFile, 2048], image: ["image", turboFile, 77] } as const;
  for (const [id, kind] of MODELS[i] ?? [])
    lines.push(
      "[[models]]",
      `id = "${id}"`,
      `name = "${id}"`,
      `kind = "${as[kind][0]}"`,
      `files = { model = ${JSON.stringify(as[kind][1])} }`,
      `max_context = ${as[kind][2]}`,
      ...(kind === "chat" ? ["slots = 2"] : []),
      kind === "image" ? 'load = "first_use"' : 'load = "start"',
    );
  writeFileSync(path, lines.join("\n") + "\n");
  return path;
}

const env = (dir: string, i: number) => ({ APPLIANCE_CONFIG: configFor(dir, i), ...nodeEnv(url) });

/** Starts node i (again, on its own data dir: the same node id) and drains its output, keeping the last of it. */
async function startNode(i: number): Promise<void> {
  const dir = nodes[i]?.dir ?? tempDir(`appliance-fwd-${i}-`);
  if (!nodes[i]) dirs.push(dir);
  nodes[i] = await serveNode(dir, env(dir, i));
}

afterAll(async () => {
  for (const n of nodes) n?.child.kill("SIGKILL");
  await Promise.all(nodes.map((n) => n?.child.exited));
  await sql?.close();
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

const admin = (args: string[]) => {
  const dir = tempDir("appliance-fwd-cli-");
  dirs.push(dir);
  const r = cli(dir, args, env(dir, 0));
  if (r.code !== 0) throw new Error(`appliance ${args.join(" ")} failed: ${r.stderr}`);
  return r;
};
const newKey = (account: string, extra: string[] = []) => admin(["keys", "create", "--account", account, "--premium", "--json", ...extra]).json<{ key: string; id: string }>();

/** Waits until every node lists `ids` (each reads the others' models at its beats, every 3 s). */
async function untilUnion(ids: string[], timeoutMs = 15_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const lists = await Promise.all(nodes.map((n) => modelIds(n.url)));
    if (lists.every((l) => ids.every((id) => l.includes(id)))) return;
    if (Date.now() > until) throw new Error(`the nodes' model lists are ${JSON.stringify(lists)}, not all of ${ids}`);
    await Bun.sleep(200);
  }
}

async function modelIds(base: string): Promise<string[]> {
  const r = await fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  return ((await r.json()) as { data: { id: string }[] }).data.map((m) => m.id);
}

async function usageOf(requestId: string): Promise<number> {
  const [{ n }] = await sql`SELECT COUNT(*) AS n FROM usage WHERE request_id = ${requestId}`;
  return Number(n);
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await Bun.sleep(100);
  }
}

beforeAll(async () => {
  url = await freshDatabase("cluster_forward");
  sql = new SQL({ url, max: 2 });
  [chatFile, embedFile, nliFile] = await Promise.all([ensureChatModel("chat"), ensureOnnxModel("embed"), ensureOnnxModel("nli")]);
  turboFile = ensureDiffusionModel("diffusion-turbo");
  const { getLlama } = await import("node-llama-cpp");
  const m = await (await getLlama({ build: "never", gpu: false })).loadModel({ modelPath: chatFile, vocabOnly: true });
  noEnd = Object.fromEntries(SPECIAL_TOKENS.flatMap((t) => m.tokenize(t, true)).map((t) => [String(t), -100]));
  await m.dispose();
  admin(["store", "migrate"]);
  admin(["accounts", "create", "team", "--credit", "50"]);
  key = newKey("team").key;
  await Promise.all([0, 1, 2].map(startNode));
  await untilUnion(["embed-1", "nli-1", "turbo-1", "chat-2", "chat-x", "chat-3"]);
}, 240_000);

describe("three nodes serving different models are one appliance", () => {
  test("the model list is the same on every node: every live node's models", async () => {
    const lists = await Promise.all(nodes.map((n) => modelIds(n.url)));
    expect(lists[0]!.slice().sort()).toEqual(["chat-2", "chat-3", "chat-x", "embed-1", "nli-1", "turbo-1"]);
    expect(lists[1]).toEqual(lists[0]!);
    expect(lists[2]).toEqual(lists[0]!);
    // Anthropic's shape too, and one model retrieved at a node that does not serve it.
    const a = new Anthropic({ apiKey: key, baseURL: nodes[0]!.url, maxRetries: 0 });
    expect((await a.models.list()).data.map((m) => m.id).sort()).toEqual(["chat-2", "chat-3", "chat-x", "embed-1", "nli-1", "turbo-1"]);
    const o = new OpenAI({ apiKey: key, baseURL: `${nodes[0]!.url}/v1`, maxRetries: 0 });
    expect((await o.models.retrieve("chat-3")).id).toBe("chat-3");
  }, 30_000);

  test("node 3's model asked at node 1 streams intact in all three chat formats, one usage row each", async () => {
    const o = new OpenAI({ apiKey: key, baseURL: `${nodes[0]!.url}/v1`, maxRetries: 0 });
    const ids: string[] = [];

    const { data: chat, response: r1 } = await o.chat.completions.create({ model: "chat-3", messages: [{ role: "user", content: "hi" }], max_tokens: 8, stream: true, stream_options: { include_usage: true } }).withResponse();
    let finished = false;
    let usage = 0;
    for await (const c of chat) {
      if (c.choices[0]?.finish_reason) finished = true;
      if (c.usage) usage = c.usage.completion_tokens;
    }
    expect(finished).toBe(true);
    expect(usage).toBeGreaterThan(0);
    ids.push(r1.headers.get("x-request-id")!);

    const { data: resp, response: r2 } = await o.responses.create({ model: "chat-3", input: "hi", max_output_tokens: 16, stream: true }).withResponse();
    const types: string[] = [];
    for await (const e of resp) types.push(e.type);
    expect(types[0]).toBe("response.created");
    expect(["response.completed", "response.incomplete"]).toContain(types.at(-1)!); // incomplete: max_output_tokens reached
    ids.push(r2.headers.get("x-request-id")!);

    const a = new Anthropic({ apiKey: key, baseURL: nodes[0]!.url, maxRetries: 0 });
    const { data: msgs, response: r3 } = await a.messages.create({ model: "chat-3", max_tokens: 8, messages: [{ role: "user", content: "hi" }], stream: true }).withResponse();
    const kinds: string[] = [];
    for await (const e of msgs) kinds.push(e.type);
    expect(kinds[0]).toBe("message_start");
    expect(kinds.at(-1)).toBe("message_stop");
    ids.push(r3.headers.get("x-request-id")!);

    for (const id of ids) await until(`usage row of ${id}`, async () => (await usageOf(id)) === 1, 5_000);
    const rows = await sql`SELECT request_id, model FROM usage WHERE request_id IN ${sql(ids)}`;
    expect(rows.map((r: { model: string }) => r.model)).toEqual(["chat-3", "chat-3", "chat-3"]);
  }, 60_000);

  test("a console session signed in at node 1 chats with node 3's model: forwarded with its console key named in the signed hop, billed once to the account", async () => {
    const dir = tempDir("appliance-fwd-cli-");
    dirs.push(dir);
    const set = Bun.spawnSync([process.execPath, CLI, "accounts", "password", "team"], {
      env: { PATH: process.env.PATH ?? "", HOME: dir, XDG_CONFIG_HOME: join(dir, "x"), APPLIANCE_DATA_DIR: dir, ...env(dir, 0) },
      stdin: Buffer.from("team-console-password-1\n"),
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(set.exitCode).toBe(0);
    const base = nodes[0]!.url;
    const login = await fetch(`${base}/console/api/login`, { method: "POST", headers: { "content-type": "application/json", origin: base }, body: JSON.stringify({ account: "team", password: "team-console-password-1" }) });
    expect(login.status).toBe(200);
    const cookie = login.headers.getSetCookie().map((c) => c.split(";")[0]!).find((c) => c.startsWith("appliance_session="))!;
    const csrf = ((await login.json()) as { csrf: string }).csrf;
    const before = Number((await sql`SELECT balance_micros FROM accounts WHERE name = 'team'`)[0].balance_micros);
    const res = await fetch(`${base}/console/api/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", origin: base, cookie, "x-csrf-token": csrf },
      body: JSON.stringify({ model: "chat-3", messages: [{ role: "user", content: "hi" }], max_tokens: 8, stream: true, stream_options: { include_usage: true } }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-appliance-node")).toBe(nodes[2]!.id);
    const text = await res.text();
    expect(text).toContain("data: [DONE]");
    const id = res.headers.get("x-request-id")!;
    await until(`usage row of ${id}`, async () => (await usageOf(id)) === 1, 5_000);
    const [row] = await sql`SELECT u.cost_micros, u.model, k.purpose, a.name FROM usage u JOIN api_keys k ON k.id = u.key_id JOIN accounts a ON a.id = u.account_id WHERE u.request_id = ${id}`;
    expect({ model: row.model, purpose: row.purpose, account: row.name }).toEqual({ model: "chat-3", purpose: "console", account: "team" });
    expect(Number((await sql`SELECT balance_micros FROM accounts WHERE name = 'team'`)[0].balance_micros)).toBe(before - Number(row.cost_micros));
  }, 60_000);

  test("node 1's classifier and image model asked at nodes 2 and 3: answered as node 1 answers, one usage row each", async () => {
    const classify = await fetch(`${nodes[1]!.url}/v1/classify`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "nli-1", pairs: [{ premise: "A dog runs in the park.", hypothesis: "An animal is outside." }] }),
    });
    expect(classify.status).toBe(200);
    const c = (await classify.json()) as { model: string; data: { probs: number[] }[] };
    expect(c.model).toBe("nli-1");
    expect(c.data[0]!.probs.reduce((x, y) => x + y, 0)).toBeCloseTo(1, 6);
    const o = new OpenAI({ apiKey: key, baseURL: `${nodes[2]!.url}/v1`, maxRetries: 0 });
    const { data: image, response } = await o.images.generate({ model: "turbo-1", prompt: "a boat", size: "256x256", response_format: "b64_json", steps: 2 } as OpenAI.ImageGenerateParamsNonStreaming).withResponse();
    expect(Buffer.from(image.data![0]!.b64_json!, "base64").subarray(1, 4).toString()).toBe("PNG");
    for (const id of [classify.headers.get("x-request-id")!, response.headers.get("x-request-id")!]) await until(`usage row of ${id}`, async () => (await usageOf(id)) === 1, 5_000);
  }, 60_000);

  test("60 mixed concurrent requests at all three nodes: the ledger exact, a key's rpm exact", async () => {
    const made = newKey("team", ["--rpm", "40"]);
    const before = Number((await sql`SELECT balance_micros FROM accounts WHERE name = 'team'`)[0].balance_micros);
    const models = ["embed-1", "chat-2", "chat-3", "chat-x"];
    const results = await Promise.all(
      Array.from({ length: 60 }, async (_, i) => {
        const model = models[i % 4]!;
        const path = model.startsWith("embed") ? "/v1/embeddings" : "/v1/chat/completions";
        const body = model.startsWith("embed") ? { model, input: `mixed ${i}` } : { model, messages: [{ role: "user", content: `mixed ${i}` }], max_tokens: 4 };
        const r = await fetch(`${nodes[i % 3]!.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${made.key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
        const text = await r.text();
        return { status: r.status, id: r.headers.get("x-request-id")!, code: r.status === 200 ? "ok" : (JSON.parse(text) as { error: { code: string } }).error.code };
      }),
    );
    // The key's 40 a minute are counted once per request, wherever it is served: exactly 20 over.
    // A request inside the rate may still find every slot of its model busy (workers_busy).
    expect(results.filter((r) => r.code === "rate_limit_exceeded")).toHaveLength(20);
    expect(results.filter((r) => r.code !== "rate_limit_exceeded" && r.code !== "ok" && r.code !== "workers_busy")).toEqual([]);
    const served = results.filter((r) => r.status === 200).map((r) => r.id);
    expect(served.length).toBeGreaterThan(20);
    const [{ n, ids, cost }] = await sql`SELECT COUNT(*) AS n, COUNT(DISTINCT request_id) AS ids, COALESCE(SUM(cost_micros), 0) AS cost FROM usage WHERE key_id = ${made.id}`;
    expect(Number(n)).toBe(served.length);
    expect(Number(ids)).toBe(served.length);
    const [{ m }] = await sql`SELECT COUNT(*) AS m FROM usage WHERE request_id IN ${sql(served)}`;
    expect(Number(m)).toBe(served.length);
    const after = Number((await sql`SELECT balance_micros FROM accounts WHERE name = 'team'`)[0].balance_micros);
    expect(before - after).toBe(Number(cost));
  }, 60_000);

  test("a key revoked by the CLI is refused on every node within 1 s, forwarded or not", async () => {
    const made = newKey("team");
    const ask = (i: number, model: string) =>
      fetch(`${nodes[i]!.url}/v1/embeddings`, { method: "POST", headers: { authorization: `Bearer ${made.key}`, "content-type": "application/json" }, body: JSON.stringify({ model, input: "x" }) }).then(async (r) => (await r.arrayBuffer(), r.status));
    expect(await ask(1, "embed-1")).toBe(200); // forwarded to node 1
    admin(["keys", "revoke", made.id]);
    const t0 = Date.now();
    await until("a 401 everywhere", async () => (await Promise.all([ask(0, "embed-1"), ask(1, "embed-1"), ask(2, "embed-1")])).every((s) => s === 401), 1_000);
    expect(Date.now() - t0).toBeLessThanOrEqual(1_000);
  }, 30_000);

  test("a stream through node 1 from node 2, node 2 killed mid-stream: the format's error event, nothing billed, holds released", async () => {
    const r = await fetch(`${nodes[0]!.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "chat-2", messages: [{ role: "user", content: "a long answer" }], max_tokens: 3000, stream: true, logit_bias: noEnd }),
    });
    expect(r.status).toBe(200);
    const id = r.headers.get("x-request-id")!;
    const reader = r.body!.getReader();
    let text = "";
    while (!text.includes("\n\n")) text += new TextDecoder().decode((await reader.read()).value);
    nodes[1]!.child.kill("SIGKILL");
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const events = text.trimEnd().split("\n\n");
    const last = JSON.parse(events.at(-1)!.replace(/^data: /, ""));
    expect(last.error.code).toBe("upstream_error");
    for (const e of events.slice(0, -1)) expect(JSON.parse(e.replace(/^data: /, "")).object).toBe("chat.completion.chunk"); // whole events only
    expect(text).not.toContain("[DONE]");
    // Nothing billed; what node 2 held lapses with its heartbeat and is dropped by the others.
    const account = (await sql`SELECT id FROM accounts WHERE name = 'team'`)[0].id as string;
    await until("node 2's holds dropped", async () => Number((await sql`SELECT COUNT(*) AS n FROM credit_holds WHERE account_id = ${account}`)[0].n) === 0, HOLD_LEASE_MS + 15_000);
    expect(await usageOf(id)).toBe(0);
    await startNode(1); // back for the batch
    await untilUnion(["chat-2"]);
  }, 90_000);

  test("a 120-line batch with node 2 killed a quarter through completes: one result per line, usage rows = completed lines", async () => {
    const o = new OpenAI({ apiKey: key, baseURL: `${nodes[0]!.url}/v1`, maxRetries: 0 });
    const lines = Array.from({ length: 120 }, (_, i) => JSON.stringify({ custom_id: `l${i}`, method: "POST", url: "/v1/chat/completions", body: { model: "chat-x", messages: [{ role: "user", content: `line ${i}` }], max_tokens: 160 } }));
    const file = await o.files.create({ file: await toFile(Buffer.from(lines.join("\n") + "\n"), "in.jsonl"), purpose: "batch" });
    const created = await o.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    let done = await o.batches.retrieve(created.id);
    let killedAt = -1;
    let heldByDead = 0;
    for (const end = Date.now() + 60_000; !["completed", "failed", "expired", "cancelled"].includes(done.status); done = await o.batches.retrieve(created.id)) {
      if (Date.now() > end) throw new Error(`batch still ${done.status}: ${JSON.stringify(done.request_counts)}`);
      if (killedAt < 0 && (done.request_counts?.completed ?? 0) >= 30) {
        // Node 2 is frozen first, so what it holds cannot change before it dies: killed holding a
        // line (they run again elsewhere once their leases lapse), else let go on and tried again.
        const victim = nodes[1]!.child;
        victim.kill("SIGSTOP");
        const [{ n }] = await sql`SELECT COUNT(*) AS n FROM batch_lines WHERE batch_id = ${created.id} AND state = 'pending' AND lease_owner LIKE ${`%:${victim.pid}:%`}`;
        if (Number(n) > 0) {
          heldByDead = Number(n);
          victim.kill("SIGKILL");
          await victim.exited;
          killedAt = (await o.batches.retrieve(created.id)).request_counts!.completed;
        } else victim.kill("SIGCONT");
      }
      await Bun.sleep(100);
    }
    expect(killedAt).toBeGreaterThanOrEqual(30);
    expect(killedAt).toBeLessThan(120); // node 2 died with lines left
    expect(heldByDead).toBeGreaterThan(0); // and with lines of its own in progress
    expect(done.status).toBe("completed");
    if (done.error_file_id) {
      console.log("errors:", await (await o.files.content(done.error_file_id)).text());
      for (const [i, n] of nodes.entries()) console.log(`node ${i + 1}:`, n.log.split("\n").filter((x) => /_36|model_not_found|not found|batch/.test(x)).join("\n"));
    }
    expect(done.request_counts).toEqual({ total: 120, completed: 120, failed: 0 });
    const out = (await (await o.files.content(done.output_file_id!)).text()).trim().split("\n").map((l) => JSON.parse(l) as { custom_id: string; response: { status_code: number } });
    expect(out.map((l) => l.custom_id).sort()).toEqual(lines.map((_, i) => `l${i}`).sort());
    expect(out.every((l) => l.response.status_code === 200)).toBe(true);
    const [{ n, ids }] = await sql`SELECT COUNT(*) AS n, COUNT(DISTINCT request_id) AS ids FROM usage WHERE batch = 1 AND model = 'chat-x'`;
    expect(Number(n)).toBe(120);
    expect(Number(ids)).toBe(120);
  }, 90_000);

  test("a hop that is forged, stale or replayed is refused in the endpoint's format; a signed one is served once, under its request id", async () => {
    const [{ id: target }] = await sql`SELECT id FROM cluster_nodes WHERE url = ${nodes[0]!.url}`;
    const body = JSON.stringify({ model: "embed-1", input: "hop" });
    const send = (hop: string | null, path = "/v1/embeddings", b = body) =>
      fetch(`${nodes[0]!.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "anthropic-version": "2023-06-01", ...(hop === null ? {} : { [HOP_HEADER]: hop }) }, body: b });
    const sign = (o: { at?: number; requestId?: string; secret?: string; path?: string; b?: string }) =>
      signHop(o.secret ?? CLUSTER_SECRET, { from: "node-x", to: target, at: o.at ?? Date.now(), requestId: o.requestId ?? `req_hop${Math.random().toString(36).slice(2)}`, bodyHash: bodyHashOf(o.b ?? body) }, "POST", o.path ?? "/v1/embeddings");
    const refused = async (r: Response): Promise<unknown[]> => [r.status, ((await r.json()) as { error: unknown }).error];
    expect(await refused(await send("v1 a b c"))).toEqual([401, expect.objectContaining({ code: "hop_refused" })]);
    expect(await refused(await send(sign({ secret: "x".repeat(40) })))).toEqual([401, expect.objectContaining({ code: "hop_refused" })]);
    expect(await refused(await send(sign({ at: Date.now() - 120_000 })))).toEqual([401, expect.objectContaining({ code: "hop_refused" })]);
    expect(await refused(await send(sign({}), "/v1/embeddings", JSON.stringify({ model: "embed-1", input: "another body" })))).toEqual([401, expect.objectContaining({ code: "hop_refused" })]);
    // Anthropic's envelope on /v1/messages
    const m = JSON.stringify({ model: "chat-3", max_tokens: 4, messages: [{ role: "user", content: "hi" }] });
    expect(await refused(await send(sign({ secret: "x".repeat(40), path: "/v1/messages", b: m }), "/v1/messages", m))).toEqual([401, { type: "authentication_error", message: expect.stringContaining("forwarded by another node") }]);
    const good = sign({ requestId: "req_hop_signed_once" });
    const first = await send(good);
    expect(first.status).toBe(200);
    expect(first.headers.get("x-request-id")).toBe("req_hop_signed_once");
    await first.arrayBuffer();
    expect(await refused(await send(good))).toEqual([401, expect.objectContaining({ code: "hop_refused", message: expect.stringContaining("replay") })]);
    expect(await usageOf("req_hop_signed_once")).toBe(1);
  }, 30_000);

  test("HAProxy in front of the three, node 3 killed under streams: only the streams node 3 served fail, and new requests all succeed", async () => {
    if (nodes[1]!.child.exitCode !== null || nodes[1]!.child.signalCode) await startNode(1);
    await untilUnion(["chat-2", "chat-x"]);
    const proxy = await startHaproxy({ backends: nodes.map((n) => n.url), balance: "roundrobin" });
    try {
      const [{ id: third }] = await sql`SELECT id FROM cluster_nodes WHERE url = ${nodes[2]!.url}`;
      const ask = (max_tokens: number, stream: boolean) =>
        fetch(`${proxy.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "chat-x", messages: [{ role: "user", content: "go on" }], max_tokens, stream, logit_bias: noEnd }) });
      const streams = (await Promise.all(Array.from({ length: 6 }, () => ask(2000, true)))).filter((r) => r.status === 200);
      const readers = streams.map((r) => ({ node: r.headers.get("x-appliance-node"), reader: r.body!.getReader(), text: "" }));
      // Every stream under way before the kill.
      await Promise.all(readers.map(async (s) => {
        while (!s.text.includes("\n\n")) s.text += new TextDecoder().decode((await s.reader.read()).value);
      }));
      expect(readers.some((s) => s.node === third)).toBe(true);
      expect(readers.some((s) => s.node !== third)).toBe(true);
      nodes[2]!.child.kill("SIGKILL");
      const ends = await Promise.all(
        readers.map(async (s) => {
          try {
            for (;;) {
              const { value, done } = await s.reader.read();
              if (done) break;
              s.text += new TextDecoder().decode(value);
            }
          } catch {
            return { node: s.node, ok: false };
          }
          return { node: s.node, ok: s.text.includes("data: [DONE]") };
        }),
      );
      // The kill cut node 3's streams still running (one that had sent its end before is whole); no other failed.
      const failed = ends.filter((e) => !e.ok);
      expect(failed.length).toBeGreaterThan(0);
      expect(failed.every((e) => e.node === third)).toBe(true);
      expect(ends.filter((e) => e.node !== third).every((e) => e.ok)).toBe(true);
      // New requests: HAProxy sends a refused connection elsewhere, node 1 forwards to node 2.
      // (one after another: chat-x has node 2's two slots left)
      const after: number[] = [];
      for (let i = 0; i < 6; i++) after.push(await ask(4, false).then(async (r) => (await r.arrayBuffer(), r.status)));
      expect(after).toEqual(Array(6).fill(200));
    } finally {
      await proxy.stop();
    }
  }, 90_000);
});
