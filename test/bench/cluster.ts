import { ensureChatModel } from "../../models/cache";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { clusterCli, embedModelToml, nodeConfig, startNode, stopNodes, type TestNode } from "../helpers/nodes";
import { freshDatabase, postgresCluster } from "../helpers/postgres";
import { median, pct } from "./stats";

// Benchmark (issue 45, several boxes as one): on this one machine, three real nodes on the tests'
// PostgreSQL, all serving the embedding model `embed`, node B also the chat model `chat-b`.
// 1. What one hop adds: time to first token of a streamed chat-b request sent to node A (which
//    forwards it to B) against the same request sent to B itself, in paired rounds alternating
//    which goes first; target ≤ 2 ms added at the median on loopback. The same for a whole
//    embedding request of a model only B serves (embed-b).
// 2. Three nodes against one: embedding requests per second with the client's requests spread
//    over the three against all sent to one, in alternating rounds. On one box the nodes share its
//    cores (this one has 2), so the ratio says what the nodes add on top of one machine's compute;
//    across boxes each brings its own.

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 8);
const PER_ROUND = Number(process.env.BENCH_REQUESTS ?? 25);
const THROUGHPUT_S = Number(process.env.BENCH_SECONDS ?? 4);
const WORKERS = 12;
const TTFT_TARGET_MS = 2;

async function firstToken(base: string, key: string): Promise<number> {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "chat-b", messages: [{ role: "user", content: "hi" }], max_tokens: 4, stream: true }),
  });
  const reader = r.body!.getReader();
  let text = "";
  let at = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
    if (!at && /"content":"[^"]/.test(text)) at = performance.now() - t0;
  }
  if (r.status !== 200 || !at) throw new Error(`chat-b at ${base}: ${r.status} ${text.slice(0, 200)}`);
  return at;
}

async function embedOnce(base: string, key: string, model: string): Promise<number> {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/embeddings`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model, input: "a short sentence to embed" }) });
  await r.arrayBuffer();
  if (r.status !== 200) throw new Error(`${model} at ${base}: ${r.status}`);
  return performance.now() - t0;
}

/** Requests per second for THROUGHPUT_S with WORKERS clients, each sending to `targets` in turn. */
async function throughput(targets: string[], key: string): Promise<number> {
  const end = performance.now() + THROUGHPUT_S * 1000;
  let done = 0;
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      for (let i = w; performance.now() < end; i++) {
        await embedOnce(targets[i % targets.length]!, key, "embed");
        done++;
      }
    }),
  );
  return done / THROUGHPUT_S;
}

export async function benchCluster(): Promise<{ pass: boolean }> {
  const url = await freshDatabase("bench_cluster");
  const [chat, embed] = await Promise.all([ensureChatModel("chat"), ensureOnnxModel("embed")]);
  const chatToml = ["[[models]]", 'id = "chat-b"', 'name = "chat-b"', 'kind = "chat"', `files = { model = ${JSON.stringify(chat)} }`, "max_context = 1024", "slots = 4", 'load = "start"', ""].join("\n");
  const embedToml = (id: string) => embedModelToml(id, embed).replace('max_context = 512', 'max_context = 512\nload = "start"');
  try {
    clusterCli(nodeConfig(embedToml("embed")), url, ["store", "migrate"]);
    clusterCli(nodeConfig(embedToml("embed")), url, ["accounts", "create", "bench", "--credit", "1000"]);
    const key = clusterCli(nodeConfig(embedToml("embed")), url, ["keys", "create", "--account", "bench", "--premium", "--json"]).json<{ key: string }>().key;
    const nodes: TestNode[] = [];
    for (const models of [embedToml("embed"), embedToml("embed") + chatToml + embedToml("embed-b"), embedToml("embed")]) nodes.push(await startNode(nodeConfig(models), url));
    const [a, b] = nodes as [TestNode, TestNode, TestNode];
    // Each node reads the others' models at its beats (3 s).
    for (const end = Date.now() + 15_000; ; ) {
      const r = await fetch(`${a.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
      if (((await r.json()) as { data: { id: string }[] }).data.some((m) => m.id === "chat-b")) break;
      if (Date.now() > end) throw new Error("node A never listed chat-b");
      await Bun.sleep(200);
    }
    for (let i = 0; i < 10; i++) await Promise.all([firstToken(a.url, key), firstToken(b.url, key), embedOnce(a.url, key, "embed-b"), embedOnce(b.url, key, "embed-b")]); // warm both paths

    console.log(`three nodes on PostgreSQL ${(await postgresCluster()).url("…")}, one box (${navigator.hardwareConcurrency} cores); ${ROUNDS} rounds × ${PER_ROUND} requests a side, alternating order`);
    const ttft = { direct: [] as number[], hop: [] as number[] };
    const whole = { direct: [] as number[], hop: [] as number[] };
    for (let round = 0; round < ROUNDS; round++) {
      const sides = round % 2 ? (["hop", "direct"] as const) : (["direct", "hop"] as const);
      for (const side of sides) {
        const base = side === "hop" ? a.url : b.url;
        for (let i = 0; i < PER_ROUND; i++) {
          ttft[side].push(await firstToken(base, key));
          whole[side].push(await embedOnce(base, key, "embed-b"));
        }
      }
    }
    const added = median(ttft.hop) - median(ttft.direct);
    const addedWhole = median(whole.hop) - median(whole.direct);
    console.log(`time to first token, chat-b: at B ${median(ttft.direct).toFixed(2)} ms (p95 ${pct(ttft.direct, 0.95).toFixed(2)}), through A ${median(ttft.hop).toFixed(2)} ms (p95 ${pct(ttft.hop, 0.95).toFixed(2)}): +${added.toFixed(2)} ms at the median (target ≤ ${TTFT_TARGET_MS} ms) ${added <= TTFT_TARGET_MS ? "PASS" : "FAIL"}`);
    console.log(`a whole embedding request, embed-b: at B ${median(whole.direct).toFixed(2)} ms, through A ${median(whole.hop).toFixed(2)} ms: +${addedWhole.toFixed(2)} ms at the median`);

    const one: number[] = [];
    const three: number[] = [];
    for (let round = 0; round < 4; round++) {
      const order = round % 2 ? ["three", "one"] : ["one", "three"];
      for (const side of order) (side === "one" ? one : three).push(await throughput(side === "one" ? [a.url] : nodes.map((n) => n.url), key));
    }
    console.log(`embeddings, ${WORKERS} clients, ${THROUGHPUT_S} s a round: one node ${median(one).toFixed(0)} req/s, three nodes ${median(three).toFixed(0)} req/s: ${(median(three) / median(one)).toFixed(2)}× (one box: the nodes share its ${navigator.hardwareConcurrency} cores)`);
    return { pass: added <= TTFT_TARGET_MS };
  } finally {
    await stopNodes();
  }
}
