// `bun run bench fuzz [count=N] [seed=N] [concurrency=N] [http=0|1] [timeout=S]` (or FUZZ_COUNT,
// FUZZ_SEED, FUZZ_CONCURRENCY, FUZZ_HTTP, FUZZ_TIMEOUT_S): the fuzzer of test/api/fuzz.test.ts
// for longer, by default over a real socket (Bun.serve's own parsing and limits included). Prints
// the requests, the statuses, every failure as a reproduction (request as sent, answer, the
// server's logged error and stack) and the slowest requests. Passes on 0 failures and /health
// still answering within a second.
import { generateCases } from "../helpers/fuzz/cases";
import { describeFailure, runFuzz, summarize } from "../helpers/fuzz/run";
import { fuzzTarget } from "../helpers/fuzz/target";

function setting(args: string[], name: string, env: string, fallback: number): number {
  const arg = args.find((a) => a.startsWith(`${name}=`));
  const raw = arg ? arg.slice(name.length + 1) : process.env[env];
  const n = raw === undefined || raw === "" ? fallback : Number(raw);
  if (!Number.isFinite(n)) throw new Error(`${name} must be a number (got ${raw})`);
  return n;
}

export async function benchFuzz(args: string[] = []) {
  const count = setting(args, "count", "FUZZ_COUNT", 10_000);
  const seed = setting(args, "seed", "FUZZ_SEED", Date.now() % 1_000_000);
  const concurrency = setting(args, "concurrency", "FUZZ_CONCURRENCY", 4);
  const http = setting(args, "http", "FUZZ_HTTP", 1) !== 0;
  const timeoutMs = setting(args, "timeout", "FUZZ_TIMEOUT_S", 60) * 1000;
  const t = await fuzzTarget({ http });
  try {
    const cases = generateCases(t.doc, t.world, { seed, count });
    console.log(`fuzz: ${cases.length} requests, seed ${seed}, concurrency ${concurrency}, ${http ? `over HTTP (${t.base})` : "in process (app.handle)"}`);
    let last = performance.now();
    const report = await runFuzz(t, cases, {
      timeoutMs,
      concurrency,
      onResult: (_, done) => {
        if (performance.now() - last > 10_000) {
          last = performance.now();
          console.log(`  … ${done}/${cases.length}`);
        }
      },
    });
    console.log(summarize(report, { slowest: 12 }));
    const unlogged = t.errors(null).filter((l) => !report.results.some((r) => r.requestId === l.request_id));
    if (unlogged.length) console.log(`server errors logged outside any fuzz request: ${unlogged.length}\n${unlogged.slice(0, 5).map((l) => `  ${l.msg} ${l.error ?? ""}`).join("\n")}`);
    if (report.failures.length) {
      // 5xx first; at most 3 reproductions per route and kind of problem.
      const rank = (k: string) => ["5xx", "stream-error", "timeout"].includes(k) ? 0 : 1;
      const sorted = [...report.failures].sort((a, b) => rank(a.problems[0]!.kind) - rank(b.problems[0]!.kind) || a.c.n - b.c.n);
      const shown = new Map<string, number>();
      console.log(`\nfailures (${report.failures.length}; reproduce with seed=${seed} count=${count}; at most 3 per route and kind):`);
      for (const r of sorted) {
        const k = `${r.c.op} ${r.problems[0]!.kind}`;
        shown.set(k, (shown.get(k) ?? 0) + 1);
        if (shown.get(k)! <= 3) console.log(describeFailure(r, t));
      }
    }
    const healthy = report.finalHealthStatus === 200 && report.finalHealthMs < 1000 && report.healthBesideMs.every((ms) => ms < 1000);
    const pass = report.failures.length === 0 && healthy;
    console.log(pass ? "PASS" : "FAIL");
    return { pass };
  } finally {
    await t.close();
  }
}
