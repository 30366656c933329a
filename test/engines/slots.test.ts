import { expect, test } from "bun:test";
import { ApiError } from "../../src/1-api/http/errors";
import { SlotPool } from "../../src/3-engines/slots";

// A fake slot: scheduling only (the real sequences are exercised by the chat tests).
class FakeSlot {
  constructor(
    readonly name: string,
    public cached: number[] = [],
  ) {}
  sharedPrefix(tokens: readonly number[]) {
    let i = 0;
    while (i < tokens.length && i < this.cached.length && tokens[i] === this.cached[i]) i++;
    return i;
  }
}

const pool = (slots: FakeSlot[], maxQueue = 1, maxWaitMs = 1000) => new SlotPool(slots, { maxQueue, maxWaitMs, modelId: "m" });

test("a request takes the free slot sharing the longest prefix with its prompt", async () => {
  const p = pool([new FakeSlot("a", [1, 2]), new FakeSlot("b", [1, 2, 3, 4]), new FakeSlot("c", [9])]);
  const lease = await p.acquire([1, 2, 3, 5]);
  expect(lease.slot.name).toBe("b");
  expect(lease.reusable).toBe(3);
});

test("with no shared prefix the least recently used slot is taken, keeping fresh caches", async () => {
  const a = new FakeSlot("a");
  const b = new FakeSlot("b");
  const p = pool([a, b]);
  (await p.acquire([7])).release(); // a used
  const next = await p.acquire([8]);
  expect(next.slot.name).toBe("b");
});

test("when all slots are busy a request waits, then gets the slot released first", async () => {
  const p = pool([new FakeSlot("a")]);
  const first = await p.acquire([1]);
  const waiting = p.acquire([2]);
  expect(p.stats()).toEqual({ total: 1, busy: 1, queued: 1, batchQueued: 0 });
  first.release();
  expect((await waiting).slot.name).toBe("a");
});

test("past the queue a request is refused at once with 429 and Retry-After", async () => {
  const p = pool([new FakeSlot("a")], 1);
  await p.acquire([1]);
  void p.acquire([2]).catch(() => {});
  const err = await p.acquire([3]).catch((e) => e);
  expect(err).toBeInstanceOf(ApiError);
  expect(err.code).toBe("workers_busy");
  expect(err.status).toBe(429);
  expect(err.message).toContain("every worker for this model is busy");
  expect(err.headers["retry-after"]).toBe("1");
});

test("a waiter that waits too long is refused and leaves the queue", async () => {
  const p = pool([new FakeSlot("a")], 2, 20);
  await p.acquire([1]);
  const err = await p.acquire([2]).catch((e) => e);
  expect(err.code).toBe("workers_busy");
  expect(p.stats().queued).toBe(0);
});

test("an aborted waiter leaves the queue and its abort reason is thrown", async () => {
  const p = pool([new FakeSlot("a")], 2);
  const held = await p.acquire([1]);
  const controller = new AbortController();
  const waiting = p.acquire([2], controller.signal);
  controller.abort(new Error("client gone"));
  expect((await waiting.catch((e) => e)).message).toBe("client gone");
  expect(p.stats()).toEqual({ total: 1, busy: 1, queued: 0, batchQueued: 0 });
  held.release();
  expect(p.stats().busy).toBe(0);
});

test("releasing twice frees the slot once", async () => {
  const p = pool([new FakeSlot("a"), new FakeSlot("b")]);
  const l = await p.acquire([1]);
  l.release();
  l.release();
  expect(p.stats()).toEqual({ total: 2, busy: 0, queued: 0, batchQueued: 0 });
});

test("batch work waits behind live requests, without bound or time limit", async () => {
  const p = pool([new FakeSlot("a")], 1, 10);
  const held = await p.acquire([1]);
  const order: string[] = [];
  const batchA = p.acquire([2], undefined, { batch: true }).then((l) => (order.push("batch-a"), l));
  const batchB = p.acquire([3], undefined, { batch: true }).then((l) => (order.push("batch-b"), l));
  await Bun.sleep(30); // past the live wait limit: batch waiters are not refused
  const live = p.acquire([4]).then((l) => (order.push("live"), l));
  expect(p.stats()).toEqual({ total: 1, busy: 1, queued: 1, batchQueued: 2 });
  held.release();
  (await live).release(); // the live request got the slot first, though it came last
  (await batchA).release();
  (await batchB).release();
  expect(order).toEqual(["live", "batch-a", "batch-b"]);
  expect(p.stats()).toEqual({ total: 1, busy: 0, queued: 0, batchQueued: 0 });
});

test("a free slot goes to batch work at once when nobody live waits", async () => {
  const p = pool([new FakeSlot("a")]);
  const l = await p.acquire([1], undefined, { batch: true });
  expect(l.slot.name).toBe("a");
});

test("with adjacency, a request takes a slot beside a busy one unless another holds more than the margin more", async () => {
  const slots = ["s0", "s1", "s2", "s3", "s4"].map((n) => new FakeSlot(n));
  const p = new SlotPool(slots, { maxQueue: 1, maxWaitMs: 1000, modelId: "m", adjacency: { margin: 2 } });
  // s0..s2 used once, so s3 and s4 are least recently used: without busy slots LRU decides
  for (const t of [[1], [2], [3]]) (await p.acquire(t)).release();
  const first = await p.acquire([5]);
  expect(first.slot.name).toBe("s3");
  // s0 holds 2 tokens of the next prompt, within the margin of the others' 0: the slots beside
  // the busy s3 go first (s2 and s4; s4, never used, is the less recently used)
  slots[0]!.cached = [6, 6];
  const second = await p.acquire([6, 6, 9]);
  expect(second.slot.name).toBe("s4");
  expect(second.reusable).toBe(0);
  // s0 holds 5 tokens of this prompt, more than the margin over the adjacent slots' 0: it wins
  slots[0]!.cached = [7, 7, 7, 7, 7];
  const third = await p.acquire([7, 7, 7, 7, 7, 1]);
  expect(third.slot.name).toBe("s0");
  expect(third.reusable).toBe(5);
});

test("with adjacency, a prefix within the margin (a template's opening tokens) counts as none: the request keeps off the slot whose cache holds another prompt", async () => {
  const slots = ["tools", "empty"].map((n) => new FakeSlot(n));
  const p = new SlotPool(slots, { maxQueue: 1, maxWaitMs: 1000, modelId: "m", adjacency: { margin: 2 } });
  // a prompt with a tool list (token 1: the template's opening token) is served by the first slot
  const tool = await p.acquire([1, 5, 5, 5, 5, 7]);
  expect(tool.slot.name).toBe("tools");
  slots[0]!.cached = [1, 5, 5, 5, 5, 7, 8];
  tool.release();
  // a plain prompt shares the opening token with it and nothing with the empty slot: the least
  // recently used slot goes first (by 1 token against 0 it took "tools" and wrote over its list)
  const plain = await p.acquire([1, 9, 9]);
  expect(plain.slot.name).toBe("empty");
  // the next tool prompt finds its list
  const next = await p.acquire([1, 5, 5, 5, 5, 6]);
  expect(next.slot.name).toBe("tools");
  expect(next.reusable).toBe(5);
});

test("without adjacency, busy neighbours do not matter", async () => {
  const slots = ["s0", "s1", "s2"].map((n) => new FakeSlot(n));
  const p = pool(slots, 1);
  const first = await p.acquire([1]); // s0
  expect(first.slot.name).toBe("s0");
  (await p.acquire([2])).release(); // s1 used and released
  // s1 is beside the busy s0 but was used more recently than s2
  expect((await p.acquire([3])).slot.name).toBe("s2");
});

test("a request with a cache key takes the slot that last served the same key, not the least recently used", async () => {
  const p = pool([new FakeSlot("a"), new FakeSlot("b")]);
  const first = await p.acquire([1], undefined, { key: "session-1" });
  expect(first.slot.name).toBe("a");
  first.release();
  const second = await p.acquire([2], undefined, { key: "session-2" });
  expect(second.slot.name).toBe("b");
  second.release();
  // a is the least recently used, but b served session-2
  expect((await p.acquire([3], undefined, { key: "session-2" })).slot.name).toBe("b");
});

test("a cache key does not outweigh a slot that holds more of the prompt", async () => {
  const a = new FakeSlot("a");
  const b = new FakeSlot("b", [5, 6, 7]);
  const p = pool([a, b]);
  (await p.acquire([9], undefined, { key: "k" })).release(); // LRU tie: a served k
  expect((await p.acquire([5, 6, 7, 8], undefined, { key: "k" })).slot.name).toBe("b");
});

test("a request that waited for a slot marks it with its cache key", async () => {
  const p = pool([new FakeSlot("a"), new FakeSlot("b")], 2);
  const a = await p.acquire([1]);
  const b = await p.acquire([2]);
  const waiting = p.acquire([3], undefined, { key: "z" });
  b.release(); // the waiter gets b
  const z = await waiting;
  expect(z.slot.name).toBe("b");
  a.release();
  z.release(); // a is now the least recently used; b served z
  expect((await p.acquire([4], undefined, { key: "z" })).slot.name).toBe("b");
});
