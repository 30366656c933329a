import { expect, test } from "bun:test";
import { cycles, importGraph, upImports } from "./import-graph";

// STYLE "Layers point down" and issue 43: nothing under src/ but the edge (1-api/), app.ts and main.ts imports
// from src/1-api/, and there are no import cycles (type-only imports count: a cycle of types is a
// knot in the design too).

const graph = importGraph();

test("the import graph is read: every module of src/, and the imports it makes", () => {
  expect(graph.size).toBeGreaterThan(150);
  expect(graph.get("app.ts")).toContain("services.ts");
  expect(graph.get("2-services/chat/service.ts")).toContain("2-services/chat/request.ts");
});

test("no module below the edge imports from src/1-api/", () => {
  expect(upImports(graph)).toEqual([]);
});

test("no import cycles", () => {
  expect(cycles(graph)).toEqual([]);
});

test("the checks can fail: a synthetic up-import and cycle are found", () => {
  const g = new Map([
    ["chat/a.ts", ["1-api/x.ts", "chat/b.ts"]],
    ["chat/b.ts", ["chat/a.ts"]],
    ["1-api/x.ts", []],
  ]);
  expect(upImports(g)).toEqual(["chat/a.ts → 1-api/x.ts"]);
  expect(cycles(g)).toEqual([["chat/a.ts", "chat/b.ts"]]);
});
