// Benchmark (issue "appliance shell"): GET /v1/models with a valid key through the full
// middleware against a bare Bun.serve handler returning the same JSON; same client, same run.
// Targets: throughput ≥ 0.5× the bare handler; p99 added latency < 1 ms.
import { join } from "node:path";

const HERE = import.meta.dir;

interface Result {
  requests: number;
  rps: number;
  p50: number;
  p99: number;
}

async function measure(mode: "bare" | "app", concurrency: number, seconds: number): Promise<Result> {
  const server = Bun.spawn([process.execPath, join(HERE, "model-list-servers.ts"), mode], { stdout: "ignore", stderr: "pipe" });
  try {
    // The server logs on stderr too: read until the READY line (or the child's end).
    const reader = server.stderr.getReader();
    let text = "";
    let ready: RegExpExecArray | null = null;
    while (!(ready = /READY (\S+) (\S+)\n/.exec(text))) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`${mode} server exited before it was ready:\n${text}`);
      text += new TextDecoder().decode(value);
    }
    reader.releaseLock();
    const [, url, key] = ready;
    const client = Bun.spawnSync([process.execPath, join(HERE, "load.ts"), `${url}/v1/models`, key!, String(concurrency), String(seconds)], {
      stdout: "pipe",
      stderr: "inherit",
    });
    if (client.exitCode !== 0) throw new Error(`load client failed for ${mode}`);
    return JSON.parse(client.stdout.toString());
  } finally {
    server.kill();
    await server.exited;
  }
}

export async function benchModelList(opts: { seconds?: number; rounds?: number } = {}) {
  const seconds = opts.seconds ?? Number(process.env.BENCH_SECONDS ?? 5);
  const rounds = opts.rounds ?? Number(process.env.BENCH_ROUNDS ?? 2);
  const best = (rs: Result[], f: (r: Result) => number, max: boolean) => rs.reduce((a, b) => ((max ? f(b) > f(a) : f(b) < f(a)) ? b : a));
  const runs: Record<string, Result[]> = { "bare-tp": [], "app-tp": [], "bare-lat": [], "app-lat": [] };
  for (let i = 0; i < rounds; i++) {
    // Alternate so drift on a shared machine hits both sides alike.
    runs["bare-tp"]!.push(await measure("bare", 32, seconds));
    runs["app-tp"]!.push(await measure("app", 32, seconds));
    runs["bare-lat"]!.push(await measure("bare", 1, seconds));
    runs["app-lat"]!.push(await measure("app", 1, seconds));
  }
  const bareTp = best(runs["bare-tp"]!, (r) => r.rps, true);
  const appTp = best(runs["app-tp"]!, (r) => r.rps, true);
  const bareLat = best(runs["bare-lat"]!, (r) => r.p99, false);
  const appLat = best(runs["app-lat"]!, (r) => r.p99, false);
  const ratio = appTp.rps / bareTp.rps;
  const added = appLat.p99 - bareLat.p99;
  const row = (name: string, tp: Result, lat: Result) =>
    `${name.padEnd(28)} ${tp.rps.toFixed(0).padStart(8)} req/s   p50 ${lat.p50.toFixed(3)} ms   p99 ${lat.p99.toFixed(3)} ms`;
  console.log(`GET /v1/models — best of ${rounds} rounds, ${seconds}s each; throughput at 32 connections, latency at 1`);
  console.log(row("bare Bun.serve handler", bareTp, bareLat));
  console.log(row("appliance (auth+limits+log)", appTp, appLat));
  console.log(`throughput ratio ${ratio.toFixed(2)}× (target ≥ 0.50×) ${ratio >= 0.5 ? "PASS" : "FAIL"}`);
  console.log(`p99 added latency ${added.toFixed(3)} ms (target < 1 ms) ${added < 1 ? "PASS" : "FAIL"}`);
  return { ratio, added, pass: ratio >= 0.5 && added < 1 };
}
