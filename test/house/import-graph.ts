import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

// The import graph of src/ (relative imports only), for the house tests: which modules point up
// into src/1-api/ (STYLE "Layers point down"), and which import cycles there are.

const SRC = resolve(import.meta.dir, "../../src");

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") && !p.endsWith(".d.ts") ? [p] : [];
  });
}

/** Each module (path under src/, e.g. "chat/service.ts") and the modules it imports. */
export function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of files(SRC)) {
    const text = readFileSync(file, "utf8");
    const targets = new Set<string>();
    for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s*["'](\.{1,2}\/[^"']+)["']/g)) {
      const base = resolve(dirname(file), m[1]!);
      const target = [`${base}.ts`, join(base, "index.ts"), base].find((p) => p.endsWith(".ts") && safeExists(p));
      if (target) targets.add(relative(SRC, target));
    }
    graph.set(relative(SRC, file), [...targets].sort());
  }
  return graph;
}

function safeExists(p: string): boolean {
  try {
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

/** "from → to" for every import from outside src/1-api (but app.ts and main.ts) into src/1-api. */
export function upImports(graph: Map<string, string[]>): string[] {
  const out: string[] = [];
  for (const [from, tos] of graph) {
    if (from.startsWith("1-api/") || from === "app.ts" || from === "main.ts") continue;
    for (const to of tos) if (to.startsWith("1-api/")) out.push(`${from} → ${to}`);
  }
  return out.sort();
}

/** The import cycles: each strongly connected component of more than one module, sorted. */
export function cycles(graph: Map<string, string[]>): string[][] {
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1) out.push(scc.sort());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return out.sort((a, b) => b.length - a.length);
}
