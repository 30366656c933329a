import { expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { DEFAULT_MAX_SLOTS, manifestProblems, ModelManifest, slotCount, slotQueue } from "../../src/lib/manifest";

// How many requests wait for a busy worker, and how long, by kind unless the manifest says.

const cases = [
  { name: "chat: as many waiting as slots, for 30 s", input: { kind: "chat", slots: 3 }, expected: { maxQueue: 3, maxWaitMs: 30_000 } },
  { name: "image: 4 waiting for 60 s (three concurrent n=1 requests fit)", input: { kind: "image", slots: 1 }, expected: { maxQueue: 4, maxWaitMs: 60_000 } },
  { name: "image with queue 0: busy means busy at once", input: { kind: "image", slots: 1, queue: 0 }, expected: { maxQueue: 0, maxWaitMs: 60_000 } },
  { name: "the manifest's queue and queue_wait_s win", input: { kind: "chat", slots: 2, queue: 8, queue_wait_s: 2.5 }, expected: { maxQueue: 8, maxWaitMs: 2_500 } },
] as const;

for (const c of cases) test(c.name, () => expect(slotQueue(c.input)).toEqual(c.expected));

// A model's `device` is its engine's backend: "webgpu" is ONNX Runtime's, "vulkan" the chat engine's.

const base = { id: "m", name: "M", files: { model: "m" }, max_context: 512 };
const deviceCases = [
  { name: "webgpu is accepted for an embedding model", input: { kind: "embedding", device: "webgpu" }, expected: [] },
  { name: "webgpu is accepted for a classifier model", input: { kind: "classifier", device: "webgpu" }, expected: [] },
  { name: "webgpu is accepted for an image model", input: { kind: "image", device: "webgpu" }, expected: [] },
  { name: "vulkan is accepted for a chat model", input: { kind: "chat", device: "vulkan" }, expected: [] },
  { name: "webgpu is refused for a chat model, naming the field", input: { kind: "chat", device: "webgpu" }, expected: ["device"] },
  { name: "vulkan is refused for an embedding model, naming the field", input: { kind: "embedding", device: "vulkan" }, expected: ["device"] },
] as const;

for (const c of deviceCases)
  test(c.name, () => {
    const m = { ...base, ...c.input };
    expect(Value.Check(ModelManifest, Value.Default(ModelManifest, structuredClone(m)))).toBe(true);
    expect(manifestProblems(m).map((p) => p.field)).toEqual([...c.expected]);
  });

test("auto, cpu and cuda are accepted for every kind", () => {
  for (const kind of ["chat", "embedding", "classifier", "reranker", "image"] as const)
    for (const device of ["auto", "cpu", "cuda"] as const) expect(manifestProblems({ kind, device })).toEqual([]);
});

test("the refusal says which device the kind takes instead", () => {
  expect(manifestProblems({ kind: "chat", device: "webgpu" })[0]!.message).toBe(
    `"webgpu" is ONNX Runtime's provider, for embedding, classifier, reranker and image models; a chat model takes "auto", "cpu", "cuda" or "vulkan"`,
  );
  expect(manifestProblems({ kind: "image", device: "vulkan" })[0]!.message).toContain(`an image model takes "auto", "cpu", "cuda" or "webgpu"`);
});

test("a device that is no backend at all is refused by the schema", () => {
  expect(Value.Check(ModelManifest, Value.Default(ModelManifest, { ...base, kind: "embedding", device: "metal" }))).toBe(false);
});

// Context per slot and slots: numbers, or "auto" (chat) for the planner to choose (issue 28).

const sizeCases = [
  { name: "a chat model may leave context and slots to the planner", input: { kind: "chat", context: "auto", slots: "auto", max_slots: 6 }, expected: [] },
  { name: "a chat model may fix its context below max_context", input: { kind: "chat", context: 256, slots: 2 }, expected: [] },
  { name: "a context above max_context is refused", input: { kind: "chat", context: 1024 }, expected: ["context"] },
  { name: "max_slots without auto slots is refused (it would do nothing)", input: { kind: "chat", slots: 2, max_slots: 4 }, expected: ["max_slots"] },
  { name: "auto slots are refused for an image model", input: { kind: "image", slots: "auto" }, expected: ["slots"] },
  { name: "a context per slot is refused for an embedding model", input: { kind: "embedding", context: "auto" }, expected: ["context"] },
  { name: "a chat model may set its gap limit, 0 included (whole plans)", input: { kind: "chat", gap_limit: 0 }, expected: [] },
  { name: "a gap limit is refused for an image model (it has no decode steps)", input: { kind: "image", gap_limit: 3 }, expected: ["gap_limit"] },
  { name: "a prompt slowdown is refused for an embedding model", input: { kind: "embedding", prompt_slowdown: 2 }, expected: ["prompt_slowdown"] },
] as const;

for (const c of sizeCases)
  test(c.name, () => {
    const m = Value.Default(ModelManifest, structuredClone({ ...base, ...c.input })) as ModelManifest;
    expect(Value.Check(ModelManifest, m)).toBe(true);
    expect(manifestProblems(m).map((p) => p.field)).toEqual([...c.expected]);
  });

test("the refusals say what to do", () => {
  expect(manifestProblems({ kind: "chat", context: 1024, max_context: 512 })[0]!.message).toBe("1024 tokens per slot is more than max_context (512); raise max_context or lower context");
  expect(manifestProblems({ kind: "image", slots: "auto" })[0]!.message).toBe(`"auto" slots are chosen for chat models; an image model takes a number`);
});

test("queues and batch widths are sized for the most slots an auto model may get", () => {
  expect(slotCount({ slots: "auto" })).toBe(DEFAULT_MAX_SLOTS);
  expect(slotCount({ slots: "auto", max_slots: 7 })).toBe(7);
  expect(slotCount({ slots: 3 })).toBe(3);
  expect(slotQueue({ kind: "chat", slots: "auto", max_slots: 6 })).toEqual({ maxQueue: 6, maxWaitMs: 30_000 });
});

test("zero or non-integer sizes are refused by the schema", () => {
  for (const bad of [{ context: 0 }, { slots: 0 }, { slots: "many" }, { context: 1.5 }, { max_slots: 0 }, { gap_limit: -1 }, { gap_limit: "high" }, { prompt_slowdown: 0.5 }])
    expect(Value.Check(ModelManifest, Value.Default(ModelManifest, { ...base, kind: "chat", ...bad }))).toBe(false);
});
