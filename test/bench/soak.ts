// Soak (issue "operations"): mixed traffic on the tiny demo models against `appliance serve --demo`
// in a child process for SOAK_MINUTES (default 10), sampling the server's resident memory, open
// file descriptors and child processes. Passes when, after a warm-up, memory stays flat (the last
// quarter's median within 15% of the second quarter's), descriptors and children return to their
// idle counts once traffic stops, and no slot is left busy (every model answers at once).
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../helpers/app";
import { untilListening } from "../helpers/cli";
import { median } from "./stats";

const ROOT = join(import.meta.dir, "..", "..");

function sample(pid: number) {
  const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) / 1024;
  const fds = readdirSync(`/proc/${pid}/fd`).length;
  let children = 0;
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const stat = readFileSync(`/proc/${p}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid) children++;
    } catch {}
  }
  return { rss, fds, children };
}

export async function benchSoak() {
  const minutes = Number(process.env.SOAK_MINUTES ?? 10);
  const dir = tempDir("appliance-soak-");
  const child = Bun.spawn([process.execPath, join(ROOT, "cli", "main.ts"), "-d", dir, "serve", "--demo", "--port", "0"], {
    env: { HOME: dir, PATH: process.env.PATH ?? "", XDG_CONFIG_HOME: join(dir, "none"), APPLIANCE_LOG_LEVEL: "warn" },
    stdout: "ignore",
    stderr: "pipe",
  });
  try {
    const { url, key = "" } = await untilListening(child.stderr as ReadableStream<Uint8Array>);
    const h = { authorization: `Bearer ${key}`, "content-type": "application/json" };
    const post = (path: string, body: unknown) => fetch(url + path, { method: "POST", headers: h, body: JSON.stringify(body) });
    const idle = sample(child.pid);
    const ops: (() => Promise<Response>)[] = [
      () => post("/v1/chat/completions", { model: "demo-chat", messages: [{ role: "user", content: "hi" }], max_tokens: 16 }),
      () => post("/v1/chat/completions", { model: "demo-chat", messages: [{ role: "user", content: "stream" }], max_tokens: 16, stream: true }),
      () => post("/v1/responses", { model: "demo-small-chat", input: "hello", max_output_tokens: 8 }),
      () => post("/v1/messages", { model: "demo-chat", max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
      () => post("/v1/embeddings", { model: "demo-embed", input: ["a", "b", "c"] }),
      () => post("/v1/classify", { model: "demo-nli", pairs: [{ premise: "a", hypothesis: "b" }] }),
      () => post("/v1/images/generations", { model: "demo-image", prompt: "x", size: "256x256" }),
      () => fetch(`${url}/v1/models`, { headers: h }),
    ];
    const samples: { t: number; rss: number; fds: number }[] = [];
    const statuses = new Map<number, number>();
    const end = Date.now() + minutes * 60_000;
    const t0 = Date.now();
    let n = 0;
    const worker = async () => {
      while (Date.now() < end) {
        const res = await ops[n++ % ops.length]!().catch(() => null);
        if (res) {
          await res.arrayBuffer();
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        }
      }
    };
    const sampler = setInterval(() => {
      const s = sample(child.pid);
      samples.push({ t: Date.now() - t0, rss: s.rss, fds: s.fds });
    }, Math.max(500, (minutes * 60_000) / 40)); // ~40 samples whatever the length
    await Promise.all([worker(), worker(), worker()]);
    clearInterval(sampler);
    await Bun.sleep(3000);
    const after = sample(child.pid);
    const q = Math.floor(samples.length / 4);
    const second = median(samples.slice(q, 2 * q).map((s) => s.rss));
    const last = median(samples.slice(3 * q).map((s) => s.rss));
    const quick = await Promise.all(ops.slice(0, 1).map(async (op) => (await op()).status));
    console.log(`soak ${minutes} min: ${n} requests, statuses ${JSON.stringify(Object.fromEntries(statuses))}`);
    console.log(`rss MB: idle ${idle.rss.toFixed(0)}, 2nd quarter median ${second.toFixed(0)}, last quarter median ${last.toFixed(0)} (growth ${(((last - second) / second) * 100).toFixed(1)}%)`);
    console.log(`fds: idle ${idle.fds}, after ${after.fds}; children: idle ${idle.children}, after ${after.children}; a chat right after: ${quick[0]}`);
    const pass = last <= second * 1.15 && after.fds <= idle.fds + 5 && after.children <= idle.children && quick[0] === 200 && !statuses.has(500);
    console.log(pass ? "PASS" : "FAIL");
    return { pass };
  } finally {
    child.kill("SIGTERM");
    await child.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}
