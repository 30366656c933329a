import { afterAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ELEM, GraphBuilder } from "../../models/onnx/graph";
import { OnnxFormatError, readGraphSummary } from "../../src/3-engines/planner/onnx-graph";
import { tempDir } from "../helpers/app";

// The planner's ONNX reader (src/3-engines/planner/onnx-graph.ts) on files that are not the protobuf they
// claim: a length past the end is refused before anything is allocated by it, and a message that
// ends inside a varint is refused instead of read forever (issue 41 M2).

const dir = tempDir("appliance-onnx-graph-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function varint(n: number | bigint): number[] {
  let v = BigInt(n);
  const out: number[] = [];
  do {
    const b = Number(v & 0x7fn);
    v >>= 7n;
    out.push(v > 0n ? b | 0x80 : b);
  } while (v > 0n);
  return out;
}
/** A length-delimited field: its tag, its length (or `claimed`), its bytes. */
const lenField = (num: number, body: number[], claimed?: number | bigint) => [...varint(num * 8 + 2), ...varint(claimed ?? body.length), ...body];
/** A ModelProto whose graph (field 7) holds `graph`. */
const model = (graph: number[]) => Uint8Array.from(lenField(7, graph));

const write = (name: string, bytes: Uint8Array) => {
  const path = join(dir, name);
  writeFileSync(path, bytes);
  return path;
};

test("a real graph's inputs and outputs are read", () => {
  const g = new GraphBuilder("tiny");
  const x = g.input("x", ELEM.float, ["batch", 3]);
  g.node("Softmax", [x], { axis: -1 }, ["probs"]);
  g.output("probs", ELEM.float, ["batch", 3]);
  const s = readGraphSummary(write("ok.onnx", g.toBytes()));
  expect(s.inputs).toEqual([{ name: "x", elemType: ELEM.float, dims: [null, 3] }]);
  expect(s.outputs.map((o) => o.name)).toEqual(["probs"]);
  expect(s.softmax).toBe(1);
});

test("a graph input (value info) claiming 2^40 bytes is refused before it is allocated", () => {
  const path = write("huge-input.onnx", model(lenField(11, [0x0a, 0x01, 0x78], 2 ** 40)));
  const started = performance.now();
  expect(() => readGraphSummary(path)).toThrow(OnnxFormatError);
  expect(() => readGraphSummary(path)).toThrow(`${path}: not a valid ONNX file: at byte 9: a field of 1099511627776 bytes runs past the end of the file (12 bytes)`);
  expect(performance.now() - started).toBeLessThan(1000);
});

test("a graph input whose message ends inside a varint is refused, not read forever", () => {
  // name "x", then the tag of field 2 (type) with no length after it
  const path = write("cut-varint.onnx", model(lenField(11, [0x0a, 0x01, 0x78, 0x12])));
  expect(() => readGraphSummary(path)).toThrow(OnnxFormatError);
  expect(() => readGraphSummary(path)).toThrow("a message of 4 bytes ends inside a varint");
});

test("an inner field longer than its message is refused", () => {
  const path = write("inner-long.onnx", model(lenField(11, [0x0a, 0x7f, 0x78])));
  expect(() => readGraphSummary(path)).toThrow("a field of 127 bytes in a message of 3");
});

test("a file cut inside a field is refused as truncated", () => {
  const path = write("cut.onnx", Uint8Array.from([...varint(7 * 8 + 2), ...varint(100), ...varint(11 * 8 + 2)]));
  expect(() => readGraphSummary(path)).toThrow("truncated: the file ends inside a field");
});
