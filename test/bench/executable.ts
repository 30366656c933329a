// Benchmark (issue "ship it"): the compiled executable against `bun cli/main.ts`, same machine,
// same run. Targets: start to /health ready (no models) ≤ 1.5 s; idle RSS ≤ 200 MB; the chat
// benchmark's streams (bench-64m, 2 threads) on the executable ≥ 0.97× the `bun run` server.
// The two servers run one at a time (2 cores), alternating round by round; medians are reported.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { buildExecutable } from "../../src/ops/build/executable";
import { tempDir } from "../helpers/app";
import { untilListening } from "../helpers/cli";
import { httpStream } from "./chat";
import { BENCH } from "./chat-setup";
import { median } from "./stats";

const ROOT = join(import.meta.dir, "..", "..");

interface Running {
  url: string;
  key: string;
  pid: number;
  startMs: number;
  stop(): Promise<void>;
}

async function start(cmd: string[], dataDir: string, configFile: string): Promise<Running> {
  mkdirSync(dataDir, { recursive: true });
  const t0 = performance.now();
  const child = Bun.spawn([...cmd, "-c", configFile, "-d", dataDir, "serve", "--port", "0"], {
    cwd: dataDir,
    env: { HOME: dataDir, PATH: "/usr/bin:/bin", TMPDIR: process.env.TMPDIR ?? "/tmp" },
    stdout: "ignore",
    stderr: "pipe",
  });
  const started = await untilListening(child.stderr as ReadableStream<Uint8Array>);
  const url = started.url;
  for (;;) {
    const ok = await fetch(`${url}/health`).then((r) => r.ok).catch(() => false);
    if (ok) break;
    await Bun.sleep(5);
  }
  const startMs = performance.now() - t0;
  // The first start of a data dir prints its admin key; later starts reuse it.
  const key = started.key ?? keys.get(dataDir) ?? "";
  keys.set(dataDir, key);
  return { url, key, pid: child.pid, startMs, stop: async () => void (child.kill("SIGTERM"), await child.exited) };
}

const keys = new Map<string, string>();
const rssMb = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) / 1024;

export async function benchExecutable() {
  const dir = tempDir("appliance-bench-exe-");
  try {
    const exe = await buildExecutable({ out: join(dir, "dist"), cpuOnly: true, log: () => {} });
    const bunRun = [process.execPath, join(ROOT, "cli", "main.ts")];
    const empty = join(dir, "empty.toml");
    writeFileSync(empty, "[server]\nlog_level = \"warn\"\n");

    // Start to /health with no models: the data dir initialised by a first start, then 5 starts.
    const starts: number[] = [];
    const rss: number[] = [];
    const idleDir = join(dir, "idle");
    await (await start([exe], idleDir, empty)).stop();
    for (let i = 0; i < 5; i++) {
      const s = await start([exe], idleDir, empty);
      starts.push(s.startMs);
      await Bun.sleep(2000);
      rss.push(rssMb(s.pid));
      await s.stop();
    }
    const startMs = median(starts);
    const idleRss = median(rss);
    console.log(`executable start → /health: median ${startMs.toFixed(0)} ms (target ≤ 1500); idle RSS ${idleRss.toFixed(0)} MB (target ≤ 200)`);

    // Chat streams, one server at a time, alternating.
    const modelPath = await ensureChatModel(BENCH.preset);
    const chatConfig = join(dir, "chat.toml");
    writeFileSync(
      chatConfig,
      `[server]\nlog_level = "warn"\n[engines]\ndevice = "cpu"\nthreads = ${BENCH.threads}\n[bootstrap]\ncredit_usd = 1000\n` +
        `[[models]]\nid = "bench"\nname = "bench"\nkind = "chat"\nfiles = { model = "${modelPath}" }\nmax_context = ${BENCH.contextSize}\nslots = ${BENCH.slots}\nload = "start"\n`,
    );
    const rounds = Number(process.env.BENCH_ROUNDS ?? 6);
    const ratios1: number[] = [];
    const ratios4: number[] = [];
    let n = 0;
    const measure = async (cmd: string[], name: string) => {
      const s = await start(cmd, join(dir, name), chatConfig);
      try {
        await httpStream(s.url, s.key, BENCH.prompt(n++)); // warm-up
        const one = await httpStream(s.url, s.key, BENCH.prompt(n++));
        const four = await Promise.all(Array.from({ length: 4 }, () => httpStream(s.url, s.key, BENCH.prompt(n++))));
        const total4 = four.reduce((a, x) => a + x.tokens, 0) / (Math.max(...four.map((x) => x.wallMs)) / 1000);
        return { one: one.decodeTps, four: total4 };
      } finally {
        await s.stop();
      }
    };
    for (let r = 0; r < rounds; r++) {
      const first = r % 2 === 0;
      const a = first ? await measure([exe], "exe") : await measure(bunRun, "bun");
      const b = first ? await measure(bunRun, "bun") : await measure([exe], "exe");
      const [exeR, bunR] = first ? [a, b] : [b, a];
      console.log(`  round ${r + 1}: 1 stream ${exeR.one.toFixed(0)} vs ${bunR.one.toFixed(0)} tok/s, 4 streams ${exeR.four.toFixed(0)} vs ${bunR.four.toFixed(0)} tok/s (executable vs bun run)`);
      ratios1.push(exeR.one / bunR.one);
      ratios4.push(exeR.four / bunR.four);
    }
    const r1 = median(ratios1);
    const r4 = median(ratios4);
    console.log(`chat on the executable / bun run: 1 stream decode ${r1.toFixed(3)}×, 4 streams total ${r4.toFixed(3)}× (target ≥ 0.97)`);
    const pass = startMs <= 1500 && idleRss <= 200 && r1 >= 0.97 && r4 >= 0.97;
    console.log(pass ? "PASS" : "FAIL");
    return { pass };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
