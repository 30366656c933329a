import { expect, test } from "bun:test";
import { mapInSlices } from "../../../src/3-engines/transformers/encoder";

test("long tokenizing work gives the event loop turns and keeps the order", async () => {
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  const busy = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end);
  };
  const out = await mapInSlices(Array.from({ length: 40 }, (_, i) => i), (x) => (busy(1), x * 2), 5);
  clearInterval(timer);
  expect(out).toEqual(Array.from({ length: 40 }, (_, i) => i * 2));
  expect(ticks).toBeGreaterThan(2);
});
