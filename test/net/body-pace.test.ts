import { expect, test } from "bun:test";
import { behind, BodyPace } from "../../src/lib/net/body-pace";

// A request body's pace (server.body_grace_s, server.body_min_bytes_per_s): the rule, and the
// sweep that cuts a body once it has fallen behind. A clock the test moves stands in for time; the
// sweep is called by hand (its own interval is set long enough never to run).

const rule = { graceMs: 10_000, minBytesPerS: 16_384 };

const cases: { name: string; elapsedMs: number; bytes: number; expected: boolean }[] = [
  { name: "nothing is behind within the grace, not even an empty body", elapsedMs: 9_999, bytes: 0, expected: false },
  { name: "a trickle (1 byte every 5 s) is behind once the grace is over", elapsedMs: 11_000, bytes: 2, expected: true },
  { name: "a head and nothing more is behind after the grace", elapsedMs: 10_500, bytes: 0, expected: true },
  { name: "exactly the minimum rate since the grace is enough", elapsedMs: 12_000, bytes: 32_768, expected: false },
  { name: "a slow LAN's 500 MB upload (1 MB/s) is far ahead", elapsedMs: 300_000, bytes: 300 * 1_000_000, expected: false },
  { name: "one far ahead may pause while it stays ahead", elapsedMs: 60_000, bytes: 1_000_000, expected: false },
  { name: "but not for ever", elapsedMs: 80_000, bytes: 1_000_000, expected: true },
];

test.each(cases)("$name", ({ elapsedMs, bytes, expected }) => {
  expect(behind(rule, elapsedMs, bytes)).toBe(expected);
});

/** A source stream the test feeds by hand, and whether it was cancelled. */
function source() {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const state = { cancelled: null as unknown };
  const stream = new ReadableStream<Uint8Array>({
    start: (c) => void (controller = c),
    cancel: (reason) => void (state.cancelled = reason ?? "cancelled"),
  });
  return { stream, push: (n: number) => controller.enqueue(new Uint8Array(n)), end: () => controller.close(), state };
}

function clock() {
  let t = 0;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

test("a body that falls behind fails with the caller's reason, its source is cancelled and onCut runs", async () => {
  const c = clock();
  const pace = new BodyPace(rule, c.now, 3_600_000);
  const src = source();
  const cuts: string[] = [];
  const body = pace.watch(src.stream, { reason: () => new Error("too slow"), onCut: () => cuts.push("cut") });
  const reading = new Response(body.stream).text();
  src.push(1);
  await Bun.sleep(1);
  c.advance(11_000);
  expect(pace.sweep()).toBe(1);
  await expect(reading).rejects.toThrow("too slow");
  expect(body.cut).toBe(true);
  expect(body.complete).toBe(false);
  expect(cuts).toEqual(["cut"]);
  expect((src.state.cancelled as Error).message).toBe("too slow");
  expect(pace.size).toBe(0);
});

test("a body that keeps up is read whole and forgotten once complete; onComplete runs", async () => {
  const c = clock();
  const pace = new BodyPace(rule, c.now, 3_600_000);
  const src = source();
  let completed = 0;
  const body = pace.watch(src.stream, { reason: () => new Error("too slow"), onComplete: () => completed++ });
  const reading = new Response(body.stream).arrayBuffer();
  for (let s = 1; s <= 30; s++) {
    src.push(20_000);
    await Bun.sleep(1);
    c.advance(1_000);
    expect(pace.sweep()).toBe(0);
  }
  src.end();
  expect((await reading).byteLength).toBe(600_000);
  expect(body.complete).toBe(true);
  expect(completed).toBe(1);
  expect(pace.size).toBe(0);
});

test("only the bodies behind are cut, each once", async () => {
  const c = clock();
  const pace = new BodyPace(rule, c.now, 3_600_000);
  const slow = source();
  const fast = source();
  const a = pace.watch(slow.stream, { reason: () => new Error("slow") });
  const b = pace.watch(fast.stream, { reason: () => new Error("slow") });
  const ra = new Response(a.stream).text().catch((e: Error) => e.message);
  const rb = new Response(b.stream).text();
  fast.push(200_000);
  await Bun.sleep(1);
  c.advance(12_000);
  expect(pace.sweep()).toBe(1);
  expect(pace.sweep()).toBe(0);
  expect(await ra).toBe("slow");
  fast.end();
  expect((await rb).length).toBe(200_000);
});

test("a body the application cancels is forgotten and its source cancelled", async () => {
  const pace = new BodyPace(rule, clock().now, 3_600_000);
  const src = source();
  const body = pace.watch(src.stream, { reason: () => new Error("slow") });
  await body.stream.cancel("not needed");
  expect(src.state.cancelled).toBe("not needed");
  expect(pace.size).toBe(0);
});
