import { addRow, firstLine, fmt } from "./rows";

// Steps 3-5 of the device check (test/gpu/device-check.sh): one bench, run in this process with the
// settings the script put in the environment (BENCH_DEVICE, BENCH_MODEL, BENCH_STREAMS, …; the
// benches' headers say what each means), its figures turned into table rows. The bench's own report
// goes to the step's log as when it runs under `bun run bench`.
//   BENCH_DEVICE=cuda bun test/gpu/bench-step.ts vs-llama-server|fairness|embeddings|images

const device = process.env.BENCH_DEVICE ?? "cpu";

async function vsLlamaServer() {
  const { benchVsLlamaServer } = await import("../bench/vs-llama-server");
  const { figures: f } = await benchVsLlamaServer();
  if (!f) throw new Error("the bench returned no figures");
  const side = (s: { agg: number; decode: number; ttft50: number }) => `${fmt(s.agg)} tok/s (decode ${fmt(s.decode)}, ttft ${fmt(s.ttft50)} ms)`;
  for (const s of f.streams)
    addRow({
      check: `vs llama-server, ${s.k} stream${s.k === 1 ? "" : "s"}`,
      device,
      result: `${fmt(s.ratioAgg, 2)}× agg, ${fmt(s.ratioDecode, 2)}× decode`,
      figure: `ours ${side(s.ours)}; llama-server ${side(s.theirs)}`,
      notes: `${f.model}, ${f.rounds} round(s)${f.placement.ours ? `; ours: ${f.placement.ours}; llama-server: ${f.placement.theirs}` : ""}`,
    });
}

async function fairness() {
  const { benchFairness } = await import("../bench/fairness");
  const { cases } = await benchFairness();
  const x = (r: { p95: number; max: number; aloneGap: number }) => `p95 ${fmt(r.p95 / r.aloneGap, 1)}× / max ${fmt(r.max / r.aloneGap, 1)}×`;
  for (const c of cases)
    addRow({
      check: `fairness: B's ${c.promptTokens}-token prompt while A generates, ${c.slots} slots`,
      device,
      result: c.pass ? "PASS" : "FAIL",
      figure: `A's gaps vs alone: ours ${x(c.ours)}, llama-server ${x(c.theirs)}`,
      notes: `${c.model}; A alone ${fmt(c.ours.aloneGap, 2)} ms a token (llama-server ${fmt(c.theirs.aloneGap, 2)}); B's first token ${fmt(c.ours.ttft)} ms (llama-server ${fmt(c.theirs.ttft)}); aggregate ${fmt(c.ours.agg)} tok/s (llama-server ${fmt(c.theirs.agg)})`,
    });
}

const where = (wanted: string, got: string) => (wanted === got || wanted !== "cuda" ? `ran on ${got}` : `fell back to ${got}`);
/** The first warning's message and reason, from the server's JSON log line. */
const warned = (lines: string[]) =>
  lines
    .slice(0, 1)
    .map((l) => {
      try {
        const j = JSON.parse(l) as Record<string, unknown>;
        const missing = Array.isArray(j.missing) ? ` (missing ${j.missing.map((m) => String(m).split("/").pop()).join(", ")})` : "";
        return `${j.msg}${j.error ? `: ${j.error}` : missing}`;
      } catch {
        return l;
      }
    })
    .join("");

async function embeddings() {
  const { benchEmbeddings } = await import("../bench/embeddings");
  const { figures: f } = await benchEmbeddings();
  addRow({
    check: "embeddings: embed-bench (MiniLM-L6 shape), 32 sentences",
    device: f.wanted,
    result: where(f.wanted, f.device),
    figure: `one request ${fmt(f.http32, 1)} ms (bare pipeline ${fmt(f.bare32, 1)} ms); 32 requests at once ${fmt(f.concurrent32, 1)} ms, one after another ${fmt(f.serial32, 1)} ms`,
    notes: warned(f.warnings),
  });
}

async function images() {
  const { benchImages } = await import("../bench/images");
  const { sets } = await benchImages();
  for (const s of sets)
    addRow({
      check: `images: ${s.id}`,
      device: s.wanted,
      result: `server ${where(s.wanted, s.server)}, bare ${s.bare}`,
      figure: s.cases.map((c) => `${c.size}: HTTP ${fmt(c.httpMs)} ms, bare ${fmt(c.bareMs)} ms`).join("; "),
      notes: [warned(s.warnings), s.cases.some((c) => c.differing) ? `${s.cases.reduce((a, c) => a + c.differing, 0)} HTTP image(s) differ from the bare pipeline's` : ""].filter(Boolean).join("; "),
    });
}

const STEPS: Record<string, () => Promise<void>> = { "vs-llama-server": vsLlamaServer, fairness, embeddings, images };
const name = process.argv[2] ?? "";
const step = STEPS[name];
if (!step) {
  console.error(`usage: bun test/gpu/bench-step.ts ${Object.keys(STEPS).join("|")}`);
  process.exit(2);
}
try {
  await step();
  process.exit(0);
} catch (e) {
  console.error(e);
  addRow({ check: name, device, result: "failed", notes: firstLine(e) });
  process.exit(1);
}
