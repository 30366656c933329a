import { expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { importGraph } from "./import-graph";

// Issue 43, the layout (web/docs/architecture.md): `ls src/` shows the request path in the order
// data takes it — 1-api (the edge and the wire formats' translation), 2-services, 3-engines,
// 4-store — with lib/ (what every layer uses) and ops/ (install, build, doctor, pulls, reload) apart,
// and the three files that assemble the program. Each layer imports only itself and the layers
// below it, and lib/; nothing on the request path imports ops/.

const LAYERS = ["1-api", "2-services", "3-engines", "4-store", "lib"] as const;
const rank = (module: string): number => {
  const top = module.split("/")[0]!;
  const i = LAYERS.indexOf(top as (typeof LAYERS)[number]);
  return i >= 0 ? i : top === "ops" ? 100 : -1; // -1: app.ts, main.ts, services.ts (the assembly), or outside src/
};

test("ls src/ is the flow, then lib and ops apart, and the assembly", () => {
  const entries = readdirSync(join(import.meta.dir, "../../src"));
  expect(entries.sort()).toEqual(["1-api", "2-services", "3-engines", "4-store", "app.ts", "lib", "main.ts", "ops", "services.ts"]);
});

test("each layer imports only itself and the layers below it (lib last), never ops/", () => {
  const graph = importGraph();
  const up: string[] = [];
  for (const [from, tos] of graph) {
    const a = rank(from);
    if (a < 0 || a === 100) continue;
    for (const to of tos) {
      const b = rank(to);
      if (b >= 0 && b < a) up.push(`${from} → ${to}`);
      if (b === 100) up.push(`${from} → ${to}`);
      if (b === -1 && !to.startsWith("..")) up.push(`${from} → ${to}`);
    }
  }
  expect(up).toEqual([]);
});
