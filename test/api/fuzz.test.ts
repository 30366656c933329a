import { afterAll, beforeAll, expect, test } from "bun:test";
import { generateCases, strategies, type FuzzCase } from "../helpers/fuzz/cases";
import { operationsOf } from "../helpers/fuzz/operations";
import { describeFailure, runFuzz, summarize, type FuzzReport } from "../helpers/fuzz/run";
import { fuzzTarget, type FuzzTarget } from "../helpers/fuzz/target";

// Property-based fuzzing of every route of /openapi.json (the console API with a signed-in
// session included): every operation gets every strategy that applies to it once, then random
// ones, from a fixed seed — wrong types, missing and extra fields, extreme numbers, prototype
// keys, malformed escapes in paths, queries and cookies, deep nesting, bad content types,
// trailing slashes and upper-case paths, missing and wrong credentials. Whatever is sent: no
// 5xx, every error in its wire format's documented envelope, and /health answering quickly
// afterwards. `bun run bench fuzz` runs the same fuzzer longer, over a socket, with any seed.

const SEED = 20261124;
const COUNT = 8000;

let t: FuzzTarget;
let cases: FuzzCase[];
let report: FuzzReport;

beforeAll(async () => {
  t = await fuzzTarget();
  cases = generateCases(t.doc, t.world, { seed: SEED, count: COUNT });
  report = await runFuzz(t, cases, { timeoutMs: 20_000, healthEvery: 250 });
  console.log(summarize(report));
}, 180_000);

afterAll(async () => {
  await t?.close();
});

const failures = (kinds: string[]) => report.failures.filter((r) => r.problems.some((p) => kinds.includes(p.kind)));
const show = (kinds: string[]) => failures(kinds).slice(0, 20).map((r) => describeFailure(r, t)).join("\n\n");

test("the cases cover every operation of /openapi.json with every strategy that applies to it", () => {
  const ops = operationsOf(t.doc);
  expect(ops.length).toBeGreaterThan(50);
  expect(ops.filter((op) => op.template.startsWith("/console/api/") && op.auth === "session").length).toBeGreaterThan(15);
  const all = strategies(t.doc);
  const seen = new Set(cases.map((c) => `${c.op} ${c.strategy}`));
  const missing = ops.flatMap((op) => all.filter((s) => s.applies(op)).map((s) => `${op.method} ${op.template} ${s.name}`)).filter((k) => !seen.has(k));
  expect(missing).toEqual([]);
  // Every body schema is fuzzed: each operation with a JSON body meets every body mutation.
  expect(ops.filter((op) => op.body).length).toBeGreaterThanOrEqual(13);
  // The same seed gives the same requests.
  expect(generateCases(t.doc, t.world, { seed: SEED, count: 200 })).toEqual(cases.slice(0, 200));
});

test("no request gets a 5xx, an internal error inside a stream, or no answer at all", () => {
  expect(show(["5xx", "stream-error", "timeout"])).toBe("");
  expect(report.results.length).toBe(COUNT);
});

test("every error is in the documented envelope of its wire format (OpenAI, or Anthropic on /v1/messages*)", () => {
  expect(show(["envelope", "bad-json"])).toBe("");
  // The run reached past validation, and met the errors it should.
  for (const status of ["200", "400", "401", "403", "404"]) expect(report.statuses[status] ?? 0).toBeGreaterThan(0);
});

test("the signed-in owner can always sign in again, whatever was sent to the sign-in route", () => {
  expect(show(["session"])).toBe("");
});

test("the server is healthy afterwards: /health answers 200 within a second, and it did so during the run", () => {
  expect(report.finalHealthStatus).toBe(200);
  expect(report.finalHealthMs).toBeLessThan(1000);
  expect(report.healthMs.length).toBeGreaterThan(0);
  expect(Math.max(...report.healthMs)).toBeLessThan(1000);
});

test("a costly body (deep nesting, megabytes) never holds the event loop: /health sent beside it answers within a second", () => {
  expect(report.healthBesideMs.length).toBeGreaterThan(50);
  const slow = report.healthBesideMs.map((ms, i) => ({ ms, i })).filter((x) => x.ms >= 1000);
  expect(slow).toEqual([]);
});
