import { onnx } from "onnx-proto";

// A small builder for ONNX graphs (opset 17, IR 8), used by the generators of the tiny test
// models: weights as float32 initializers, nodes by op type, inputs and outputs with symbolic
// dimensions ("batch", "sequence"), serialised with onnx-proto.

export const ELEM = {
  float: onnx.TensorProto.DataType.FLOAT,
  int64: onnx.TensorProto.DataType.INT64,
  float16: onnx.TensorProto.DataType.FLOAT16,
} as const;
export type Elem = (typeof ELEM)[keyof typeof ELEM];
export type Dim = number | string;
export type AttrValue = number | number[] | string | { float: number } | { floats: number[] };

export class GraphBuilder {
  private nodes: onnx.INodeProto[] = [];
  private initializers: onnx.ITensorProto[] = [];
  private inputs: onnx.IValueInfoProto[] = [];
  private outputs: onnx.IValueInfoProto[] = [];
  private counter = 0;

  constructor(readonly name: string) {}

  /** A fresh value name with a readable stem. */
  fresh(stem: string): string {
    return `${stem}_${this.counter++}`;
  }

  input(name: string, elem: Elem, dims: Dim[]): string {
    this.inputs.push(valueInfo(name, elem, dims));
    return name;
  }

  output(name: string, elem: Elem, dims: Dim[]): string {
    this.outputs.push(valueInfo(name, elem, dims));
    return name;
  }

  /** A float32 initializer (a weight) named as in real exports, e.g. "encoder.layer.0.attention.self.query.weight". */
  weight(name: string, dims: number[], values: Float32Array): string {
    const size = dims.reduce((a, b) => a * b, 1);
    if (values.length !== size) throw new Error(`${name}: ${values.length} values for shape [${dims}]`);
    this.initializers.push({
      name,
      dataType: ELEM.float,
      dims,
      rawData: new Uint8Array(values.buffer, values.byteOffset, values.byteLength),
    });
    return name;
  }

  /** An int64 initializer (shapes, axes, indices). */
  ints(name: string, values: number[], dims: number[] = [values.length]): string {
    const buf = new BigInt64Array(values.map((v) => BigInt(v)));
    this.initializers.push({ name, dataType: ELEM.int64, dims, rawData: new Uint8Array(buf.buffer) });
    return name;
  }

  /** A scalar float constant. */
  scalar(name: string, value: number): string {
    return this.weight(name, [], new Float32Array([value]));
  }

  /** Adds a node; returns its (first) output name. */
  node(op: string, inputs: string[], attrs: Record<string, AttrValue> = {}, outputs = [this.fresh(op.toLowerCase())]): string {
    this.nodes.push({
      opType: op,
      name: this.fresh(`${op}_node`),
      input: inputs,
      output: outputs,
      attribute: Object.entries(attrs).map(([k, v]) => attribute(k, v)),
    });
    return outputs[0]!;
  }

  toBytes(opts: { opset?: number; producer?: string } = {}): Uint8Array {
    const model = onnx.ModelProto.create({
      irVersion: 8,
      producerName: opts.producer ?? "appliance-model-generator",
      opsetImport: [{ domain: "", version: opts.opset ?? 17 }],
      graph: {
        name: this.name,
        node: this.nodes,
        initializer: this.initializers,
        input: this.inputs,
        output: this.outputs,
      },
    });
    return onnx.ModelProto.encode(model).finish();
  }
}

function valueInfo(name: string, elem: Elem, dims: Dim[]): onnx.IValueInfoProto {
  return {
    name,
    type: { tensorType: { elemType: elem, shape: { dim: dims.map((d) => (typeof d === "number" ? { dimValue: d } : { dimParam: d })) } } },
  };
}

function attribute(name: string, v: AttrValue): onnx.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  if (typeof v === "number") return Number.isInteger(v) ? { name, type: T.INT, i: v } : { name, type: T.FLOAT, f: v };
  if (typeof v === "string") return { name, type: T.STRING, s: new TextEncoder().encode(v) };
  if (Array.isArray(v)) return { name, type: T.INTS, ints: v };
  if ("float" in v) return { name, type: T.FLOAT, f: v.float };
  return { name, type: T.FLOATS, floats: v.floats };
}
