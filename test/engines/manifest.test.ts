import { expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { manifestProblems, ModelManifest, slotQueue } from "../../src/engines/manifest";

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
  for (const kind of ["chat", "embedding", "classifier", "image"] as const)
    for (const device of ["auto", "cpu", "cuda"] as const) expect(manifestProblems({ kind, device })).toEqual([]);
});

test("the refusal says which device the kind takes instead", () => {
  expect(manifestProblems({ kind: "chat", device: "webgpu" })[0]!.message).toBe(
    `"webgpu" is ONNX Runtime's provider, for embedding, classifier and image models; a chat model takes "auto", "cpu", "cuda" or "vulkan"`,
  );
  expect(manifestProblems({ kind: "image", device: "vulkan" })[0]!.message).toContain(`an image model takes "auto", "cpu", "cuda" or "webgpu"`);
});

test("a device that is no backend at all is refused by the schema", () => {
  expect(Value.Check(ModelManifest, Value.Default(ModelManifest, { ...base, kind: "embedding", device: "metal" }))).toBe(false);
});
