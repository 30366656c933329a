import { dirname } from "node:path";
import { COMPILED } from "./installed";

// Worker threads' entry files. From source they sit beside the module that starts them; in the
// compiled executable they are extra entry points of the build (src/ops/build/executable.ts), stored
// under the executable's virtual root with their path from the repository root and a .js name.

export function workerUrl(fromRoot: string, beside: URL): string {
  if (!COMPILED) return beside.href;
  return `${dirname(Bun.main)}/${fromRoot.replace(/\.ts$/, ".js")}`;
}
