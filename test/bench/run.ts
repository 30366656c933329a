// `bun run bench [name…]`: runs the benchmarks (not part of `bun test`) and prints their ratios.
import { benchBatches } from "./batches";
import { benchChat } from "./chat";
import { benchEmbeddings } from "./embeddings";
import { benchExecutable } from "./executable";
import { benchImages } from "./images";
import { benchFormats } from "./formats";
import { benchModels } from "./models";
import { benchSoak } from "./soak";
import { benchVsLlamaServer } from "./vs-llama-server";

const BENCHES: Record<string, () => Promise<{ pass: boolean }>> = {
  models: () => benchModels(),
  chat: () => benchChat(),
  formats: () => benchFormats(),
  embeddings: () => benchEmbeddings(),
  images: () => benchImages(),
  batches: () => benchBatches(),
  executable: () => benchExecutable(),
  soak: () => benchSoak(),
  "vs-llama-server": () => benchVsLlamaServer(),
};

const names = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(BENCHES);
let failed = false;
for (const name of names) {
  const bench = BENCHES[name];
  if (!bench) {
    console.error(`unknown benchmark "${name}" (have: ${Object.keys(BENCHES).join(", ")})`);
    process.exit(2);
  }
  console.log(`\n== ${name}`);
  failed = !(await bench()).pass || failed;
}
process.exit(failed ? 1 : 0);
