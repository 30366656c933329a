import { expect, test } from "bun:test";
import { slotQueue } from "../../src/engines/manifest";

// How many requests wait for a busy worker, and how long, by kind unless the manifest says.

const cases = [
  { name: "chat: as many waiting as slots, for 30 s", input: { kind: "chat", slots: 3 }, expected: { maxQueue: 3, maxWaitMs: 30_000 } },
  { name: "image: 4 waiting for 60 s (three concurrent n=1 requests fit)", input: { kind: "image", slots: 1 }, expected: { maxQueue: 4, maxWaitMs: 60_000 } },
  { name: "image with queue 0: busy means busy at once", input: { kind: "image", slots: 1, queue: 0 }, expected: { maxQueue: 0, maxWaitMs: 60_000 } },
  { name: "the manifest's queue and queue_wait_s win", input: { kind: "chat", slots: 2, queue: 8, queue_wait_s: 2.5 }, expected: { maxQueue: 8, maxWaitMs: 2_500 } },
] as const;

for (const c of cases) test(c.name, () => expect(slotQueue(c.input)).toEqual(c.expected));
