import { expect, test } from "bun:test";
import { validateConfig } from "../../src/lib/config";
import { batchBasisPoints, costMicros, formatMicros, parseUsd, priceFor } from "../../src/2-services/billing/pricing";

const prices = validateConfig({}).prices;

test("spec prices: chat $0.12/M in and $1.70/M out, classifier $0.05/M in, $0.003 per image", () => {
  expect(priceFor({ kind: "chat" }, prices)).toEqual({ inputPerM: 120_000, outputPerM: 1_700_000, perImage: 0 });
  expect(priceFor({ kind: "classifier" }, prices)).toEqual({ inputPerM: 50_000, outputPerM: 0, perImage: 0 });
  expect(priceFor({ kind: "image" }, prices)).toEqual({ inputPerM: 0, outputPerM: 0, perImage: 3_000 });
});

test("a model's own price overrides its kind's default", () => {
  expect(priceFor({ kind: "chat", price: { output_per_m: 2 } }, prices)).toEqual({ inputPerM: 120_000, outputPerM: 2_000_000, perImage: 0 });
});

test.each([
  { name: "a million of each", usage: { inputTokens: 1e6, outputTokens: 1e6, images: 0 }, live: 1_820_000, batch: 910_000 },
  { name: "a small request rounds up to a whole micro-dollar", usage: { inputTokens: 3, outputTokens: 1, images: 0 }, live: 3, batch: 2 },
  { name: "nothing costs nothing", usage: { inputTokens: 0, outputTokens: 0, images: 0 }, live: 0, batch: 0 },
  { name: "a full 131k context", usage: { inputTokens: 131_072, outputTokens: 0, images: 0 }, live: 15_729, batch: 7_865 },
])("chat cost: $name", ({ usage, live, batch }) => {
  const p = priceFor({ kind: "chat" }, prices);
  expect(costMicros(p, usage)).toBe(live);
  expect(costMicros(p, usage, batchBasisPoints(prices))).toBe(batch);
});

test("images cost per image", () => {
  expect(costMicros(priceFor({ kind: "image" }, prices), { inputTokens: 0, outputTokens: 0, images: 4 })).toBe(12_000);
});

test("dollar amounts parse exactly and print readably", () => {
  expect(parseUsd("10")).toBe(10_000_000);
  expect(parseUsd("0.1")).toBe(100_000);
  expect(parseUsd("$2.000001")).toBe(2_000_001);
  expect(() => parseUsd("1.0000001")).toThrow();
  expect(() => parseUsd("-1")).toThrow();
  expect(formatMicros(12_500_000)).toBe("$12.50");
  expect(formatMicros(120)).toBe("$0.00012");
  expect(formatMicros(-3_000)).toBe("-$0.003");
});
