import { expect, test } from "bun:test";
import { join } from "node:path";
import { GrammarCompiler } from "../../../src/3-engines/llama/grammar-compiler";
import type { GrammarJob } from "../../../src/3-engines/llama/grammar-worker";

// JSON Schemas become grammars in a worker process of their own (issue 41): whatever a schema does
// to llama.cpp's converter costs that process, bounded in time and memory, never the server's.

const FAKE = [process.execPath, join(import.meta.dir, "..", "..", "fixtures", "workers", "fake-grammar-worker.ts")];
const job = (param: string, schema: Record<string, unknown> = { type: "string" }): GrammarJob => ({ kind: "answer", schema, param });

test("the real worker compiles a schema; the same job again comes from the cache", async () => {
  const c = new GrammarCompiler();
  try {
    const [first] = await c.compile([job("response_format.json_schema.schema", { type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 9 } }, required: ["a"] })]);
    expect("gbnf" in first! && first.gbnf).toContain("root ::=");
    const started = performance.now();
    const [again] = await c.compile([job("response_format.json_schema.schema", { type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 9 } }, required: ["a"] })]);
    expect(again).toEqual(first!);
    expect(performance.now() - started).toBeLessThan(50);
    expect(c.starts).toBe(1);
  } finally {
    c.close();
  }
});

test("the real worker answers a schema llama.cpp cannot take with its named 400", async () => {
  const c = new GrammarCompiler();
  try {
    const [r] = await c.compile([job("response_format.json_schema.schema", { allOf: [{ $ref: "#/$defs/A" }], $defs: { A: { $ref: "#/$defs/A" } } })]);
    expect(r).toMatchObject({ error: { code: "schema_too_complex", param: "response_format.json_schema.schema.$ref" } });
  } finally {
    c.close();
  }
});

test("a worker that crashes fails its job with a named 400, and the next job gets a new worker", async () => {
  const c = new GrammarCompiler({ command: FAKE });
  try {
    const [r] = await c.compile([job("crash")]);
    expect(r).toMatchObject({ error: { code: "schema_too_complex", param: "crash" } });
    expect("error" in r! && r.error.message).toMatch(/crashed \(SIGSEGV\)/);
    expect(await c.compile([job("fine")])).toEqual([{ gbnf: 'root ::= "fine"' }]);
    expect(c.starts).toBe(2);
    // the failure is remembered: the same schema does not kill a worker again
    await c.compile([job("crash")]);
    expect(c.starts).toBe(2);
  } finally {
    c.close();
  }
});

test("a dead worker's end never reaches the worker after it: crash after crash, every next job is answered", async () => {
  const c = new GrammarCompiler({ command: FAKE });
  try {
    for (let i = 0; i < 5; i++) {
      const [crashed, fine] = await Promise.all([c.compile([job("crash", { type: "string", n: i })]), c.compile([job(`fine${i}`)])]);
      expect(crashed[0]).toMatchObject({ error: { code: "schema_too_complex" } });
      expect(fine).toEqual([{ gbnf: `root ::= "fine${i}"` }]);
    }
  } finally {
    c.close();
  }
});

test("of several jobs, only the one that crashes the worker fails", async () => {
  const c = new GrammarCompiler({ command: FAKE });
  try {
    const r = await c.compile([job("a"), job("crash"), job("b")]);
    expect(r[0]).toEqual({ gbnf: 'root ::= "a"' });
    expect(r[1]).toMatchObject({ error: { code: "schema_too_complex" } });
    expect(r[2]).toEqual({ gbnf: 'root ::= "b"' });
  } finally {
    c.close();
  }
});

test("a worker past its deadline is killed and the job fails with a named 400", async () => {
  const c = new GrammarCompiler({ command: FAKE, deadlineMs: 1000 });
  try {
    const [r] = await c.compile([job("hang")]);
    expect("error" in r! && r.error.message).toMatch(/took longer than 1 s/);
    expect(await c.compile([job("after")])).toEqual([{ gbnf: 'root ::= "after"' }]);
  } finally {
    c.close();
  }
});

test("a worker past its memory bound is killed and the job fails with a named 400", async () => {
  const c = new GrammarCompiler({ command: FAKE, maxRssBytes: 256 * 1024 * 1024, deadlineMs: 20_000 });
  try {
    const [r] = await c.compile([job("bloat")]);
    expect("error" in r! && r.error.message).toMatch(/needed more than 256 MB/);
  } finally {
    c.close();
  }
});

test("jobs sent while one is in flight wait their turn and are all answered", async () => {
  const c = new GrammarCompiler({ command: FAKE });
  try {
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => c.compile([job(`j${i}`)])));
    expect(answers.map((a) => a[0])).toEqual(Array.from({ length: 20 }, (_, i) => ({ gbnf: `root ::= "j${i}"` })));
  } finally {
    c.close();
  }
});
