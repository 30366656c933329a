import { onnx } from "onnx-proto";

// A small builder for ONNX graphs (opset 17, IR 8), used by the generators of the tiny test
// models: weights as float32 initializers (or raw bytes of any element type), nodes by op type
// (ONNX Runtime's com.microsoft contrib ops too), inputs and outputs with symbolic dimensions
// ("batch", "sequence"), serialised with onnx-proto, with large initializers optionally kept in
// external data files beside the model as big exports are.

export const ELEM = {
  float: onnx.TensorProto.DataType.FLOAT,
  int64: onnx.TensorProto.DataType.INT64,
  float16: onnx.TensorProto.DataType.FLOAT16,
  uint8: onnx.TensorProto.DataType.UINT8,
} as const;
export type Elem = (typeof ELEM)[keyof typeof ELEM];
export type Dim = number | string;
export type AttrValue = number | number[] | string | { float: number } | { floats: number[] };

/** ONNX Runtime's contrib operator domain (MatMulNBits, MultiHeadAttention, …). */
export const MS_DOMAIN = "com.microsoft";

export interface ExternalDataOptions {
  /** The model file's name: data files are `<name>_data`, `<name>_data_1`, … beside it. */
  modelName: string;
  /** How many data files the large initializers are spread over (in order, by size). */
  files: number;
  /** Initializers at least this large go to a data file (default 1 KiB). */
  minBytes?: number;
}

export class GraphBuilder {
  private nodes: onnx.INodeProto[] = [];
  private initializers: onnx.ITensorProto[] = [];
  private inputs: onnx.IValueInfoProto[] = [];
  private outputs: onnx.IValueInfoProto[] = [];
  private counter = 0;
  private readonly domains = new Set<string>();

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

  /** An initializer of any element type from its little-endian bytes (fp16 weights, packed int4 blocks). */
  raw(name: string, elem: Elem, dims: number[], bytes: Uint8Array): string {
    this.initializers.push({ name, dataType: elem, dims, rawData: bytes });
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
  node(op: string, inputs: string[], attrs: Record<string, AttrValue> = {}, outputs = [this.fresh(op.toLowerCase())], domain = ""): string {
    if (domain) this.domains.add(domain);
    this.nodes.push({
      opType: op,
      ...(domain ? { domain } : {}),
      name: this.fresh(`${op}_node`),
      input: inputs,
      output: outputs,
      attribute: Object.entries(attrs).map(([k, v]) => attribute(k, v)),
    });
    return outputs[0]!;
  }

  toBytes(opts: { opset?: number; producer?: string } = {}): Uint8Array {
    return this.encode(this.initializers, opts);
  }

  /**
   * The model and its external data files, by file name: initializers of at least `minBytes` are
   * written to `<modelName>_data`, `<modelName>_data_1`, … (split evenly by size, each tensor at a
   * 64-byte aligned offset) and referenced by location, offset and length, as exporters do for
   * models over protobuf's 2 GB limit; ONNX Runtime reads them from beside the model file.
   */
  toFiles(ext: ExternalDataOptions, opts: { opset?: number; producer?: string } = {}): Record<string, Uint8Array> {
    const min = ext.minBytes ?? 1024;
    const big = this.initializers.filter((t) => (t.rawData?.length ?? 0) >= min);
    const total = big.reduce((a, t) => a + t.rawData!.length, 0);
    const names = Array.from({ length: Math.max(1, ext.files) }, (_, i) => `${ext.modelName}_data${i ? `_${i}` : ""}`);
    const parts: Uint8Array[][] = names.map(() => []);
    const sizes = names.map(() => 0);
    let placed = 0;
    const moved = new Map<onnx.ITensorProto, onnx.ITensorProto>();
    for (const t of big) {
      const file = Math.min(names.length - 1, Math.floor((placed * names.length) / Math.max(1, total)));
      placed += t.rawData!.length;
      const pad = (64 - (sizes[file]! % 64)) % 64;
      if (pad) parts[file]!.push(new Uint8Array(pad));
      const offset = sizes[file]! + pad;
      parts[file]!.push(t.rawData!);
      sizes[file] = offset + t.rawData!.length;
      const entry = (key: string, value: string | number) => ({ key, value: String(value) });
      moved.set(t, {
        name: t.name,
        dataType: t.dataType,
        dims: t.dims,
        dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
        externalData: [entry("location", names[file]!), entry("offset", offset), entry("length", t.rawData!.length)],
      });
    }
    const files: Record<string, Uint8Array> = { [ext.modelName]: this.encode(this.initializers.map((t) => moved.get(t) ?? t), opts) };
    names.forEach((n, i) => {
      files[n] = concat(parts[i]!, sizes[i]!);
    });
    return files;
  }

  private encode(initializer: onnx.ITensorProto[], opts: { opset?: number; producer?: string }): Uint8Array {
    const model = onnx.ModelProto.create({
      irVersion: 8,
      producerName: opts.producer ?? "appliance-model-generator",
      opsetImport: [{ domain: "", version: opts.opset ?? 17 }, ...[...this.domains].map((domain) => ({ domain, version: 1 }))],
      graph: {
        name: this.name,
        node: this.nodes,
        initializer,
        input: this.inputs,
        output: this.outputs,
      },
    });
    return onnx.ModelProto.encode(model).finish();
  }
}

function concat(chunks: Uint8Array[], size: number): Uint8Array {
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
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
