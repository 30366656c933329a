import { expect, test } from "bun:test";
import { importGraph } from "./import-graph";

// Issue 43, "one road to the ledger": every charge (tokens, images, GPU minutes) goes through the
// meter (src/2-services/billing/meter.ts). The usage ledger's store module is imported by the meter alone
// (and by other store modules), so no service can charge around it.

test("only the meter (and the store itself) imports the usage ledger", () => {
  const graph = importGraph();
  const importers = [...graph].filter(([from, tos]) => tos.includes("4-store/usage.ts") && !from.startsWith("4-store/")).map(([from]) => from);
  expect(importers).toEqual(["2-services/billing/meter.ts"]);
});
