// `bun run bench [name…]`: runs the benchmarks (not part of `bun test`) and prints their ratios.
import { benchBatches } from "./batches";
import { benchChat } from "./chat";
import { benchCluster } from "./cluster";
import { benchDecisions } from "./decisions";
import { benchEmbeddings } from "./embeddings";
import { benchFairness } from "./fairness";
import { benchExecutable } from "./executable";
import { benchImages } from "./images";
import { benchFormats } from "./formats";
import { benchFuzz } from "./fuzz";
import { benchModelList } from "./model-list";
import { benchModelLoad } from "./model-load";
import { benchSoak } from "./soak";
import { benchStore } from "./store";
import { benchTls } from "./tls";
import { benchVsLlamaServer } from "./vs-llama-server";

const BENCHES: Record<string, (args: string[]) => Promise<{ pass: boolean }>> = {
  "model-list": () => benchModelList(),
  "model-load": () => benchModelLoad(),
  chat: () => benchChat(),
  formats: () => benchFormats(),
  embeddings: () => benchEmbeddings(),
  decisions: () => benchDecisions(),
  images: () => benchImages(),
  batches: () => benchBatches(),
  executable: () => benchExecutable(),
  soak: () => benchSoak(),
  tls: () => benchTls(),
  store: () => benchStore(),
  cluster: () => benchCluster(),
  fairness: () => benchFairness(),
  "vs-llama-server": () => benchVsLlamaServer(),
  fuzz: (args) => benchFuzz(args),
};

/** Names that run several benchmarks in turn (`bench models`: the model list, then models loaded on demand). */
const GROUPS: Record<string, string[]> = { models: ["model-list", "model-load"] };

// Words of the form key=value are settings for the benchmarks named (e.g. `fuzz count=20000`).
const argv = process.argv.slice(2);
const settings = argv.filter((a) => a.includes("="));
const named = argv.filter((a) => !a.includes("="));
const names = (named.length ? named : Object.keys(BENCHES)).flatMap((n) => GROUPS[n] ?? [n]);
let failed = false;
for (const name of names) {
  const bench = BENCHES[name];
  if (!bench) {
    console.error(`unknown benchmark "${name}" (have: ${[...Object.keys(BENCHES), ...Object.keys(GROUPS)].join(", ")})`);
    process.exit(2);
  }
  console.log(`\n== ${name}`);
  failed = !(await bench(settings)).pass || failed;
}
process.exit(failed ? 1 : 0);
