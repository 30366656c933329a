import { expect, test } from "bun:test";
import * as ort from "onnxruntime-node";
import { ELEM, GraphBuilder } from "../../models/onnx/graph";

test("a built graph loads in onnxruntime and computes", async () => {
  const g = new GraphBuilder("tiny");
  const x = g.input("x", ELEM.float, ["batch", 3]);
  const w = g.weight("linear.weight", [3, 2], new Float32Array([1, 0, 0, 1, 1, 1]));
  const y = g.node("MatMul", [x, w]);
  const scaled = g.node("Mul", [y, g.scalar("two", 2)]);
  g.node("Softmax", [scaled], { axis: -1 }, ["probs"]);
  g.output("probs", ELEM.float, ["batch", 2]);
  const session = await ort.InferenceSession.create(g.toBytes(), { executionProviders: ["cpu"] });
  const out = await session.run({ x: new ort.Tensor("float32", new Float32Array([1, 2, 3]), [1, 3]) });
  const probs = out.probs!.data as Float32Array;
  // [1,2,3]·w = [4, 5] → ×2 = [8, 10] → softmax
  const e = [Math.exp(8), Math.exp(10)];
  expect(probs[0]).toBeCloseTo(e[0]! / (e[0]! + e[1]!), 5);
  expect(probs[0]! + probs[1]!).toBeCloseTo(1, 6);
});

test("int64 initializers and integer attributes serialise correctly", async () => {
  const g = new GraphBuilder("shape");
  const x = g.input("x", ELEM.float, [2, 3]);
  g.node("Reshape", [x, g.ints("shape", [3, 2])], {}, ["y"]);
  g.output("y", ELEM.float, [3, 2]);
  const session = await ort.InferenceSession.create(g.toBytes());
  const out = await session.run({ x: new ort.Tensor("float32", new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]) });
  expect(out.y!.dims).toEqual([3, 2]);
});
