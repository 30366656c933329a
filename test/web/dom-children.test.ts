import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

// Issue 42: the DOM's append() and replaceChildren() print null, undefined and false as text (the
// Usage page showed "null" under its charts). The console builds every child list through dom.js
// (h, put, replace), which skips them; this keeps any other file from calling the raw DOM methods
// with children (chart.js builds SVG from nodes it makes itself; replaceChildren() with nothing is
// harmless). The browser test (console.browser.test.ts) checks the rendered pages themselves.

const WEB = join(import.meta.dir, "../../web");
const ALLOWED = new Set(["dom.js", "chart.js"]);

test("no console script appends or replaces children except through dom.js's put and replace", () => {
  const offenders: string[] = [];
  for (const name of readdirSync(WEB).filter((n) => n.endsWith(".js") && !ALLOWED.has(n))) {
    readFileSync(join(WEB, name), "utf8").split("\n").forEach((line, i) => {
      if (/\.(append|prepend|before|after|replaceWith)\(|\.replaceChildren\((?!\))/.test(line)) offenders.push(`web/${name}:${i + 1}: ${line.trim()}`);
    });
  }
  expect(offenders).toEqual([]);
});
