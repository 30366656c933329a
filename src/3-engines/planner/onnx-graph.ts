import { closeSync, fstatSync, openSync, readSync } from "node:fs";

// What the planner needs from an ONNX graph file, read without loading it: the external data files
// its initializers name (what ONNX Runtime will read besides the graph), the graph's inputs and
// outputs with their element types and dimensions, and whether it computes attention with a fused
// operator (no materialised score matrix). The file is walked as protobuf through a small window:
// weights stored inline (raw_data) and nodes' bodies are skipped by their length, never read whole,
// so a 130 MB graph costs a few thousand small reads.
//   ModelProto.graph = 7; GraphProto: node = 1, initializer = 5, input = 11, output = 12
//   NodeProto.op_type = 4; TensorProto: dims = 1, external_data = 13 (key = 1, value = 2)
//   ValueInfoProto: name = 1, type = 2; TypeProto.tensor_type = 1: elem_type = 1, shape = 2
//   TensorShapeProto.dim = 1: dim_value = 1 | dim_param = 2
// (onnx/onnx.proto3)

export interface GraphValue {
  name: string;
  /** TensorProto.DataType: 1 float, 10 float16, 7 int64, … (0 when not a tensor). */
  elemType: number;
  /** A number per dimension, or null where it is symbolic. */
  dims: (number | null)[];
}

export interface GraphSummary {
  /** External data file names (relative to the graph's folder), each once. */
  externalFiles: string[];
  inputs: GraphValue[];
  outputs: GraphValue[];
  /** A fused attention operator (MultiHeadAttention, GroupQueryAttention, Attention, …) is used. */
  fusedAttention: boolean;
  /** Softmax nodes: unfused attention (each materialises a score matrix). */
  softmax: number;
  /** Output channels of the 4-D initializers (convolutions), unique, ascending. */
  convWidths: number[];
  /** The largest first dimension of a 2-D or 3-D initializer (a matrix's rows; MatMulNBits' N). */
  maxRows: number;
}

/** Bytes of one element of a TensorProto.DataType (4 where unknown). */
export function elemBytes(elemType: number): number {
  return ({ 10: 2, 16: 2, 11: 8, 7: 8, 1: 4, 6: 4, 2: 1, 3: 1, 9: 1, 4: 2, 5: 2 } as Record<number, number>)[elemType] ?? 4;
}

/**
 * A file that is not the protobuf it claims to be: a length or varint past the end of the file or
 * of its message. Lengths are checked before anything is read or allocated by them.
 */
export class OnnxFormatError extends Error {
  override name = "OnnxFormatError";
  constructor(
    readonly path: string,
    readonly offset: number,
    detail: string,
  ) {
    super(`${path}: not a valid ONNX file: at byte ${offset}: ${detail}`);
  }
}

const FUSED = new Set(["MultiHeadAttention", "GroupQueryAttention", "Attention", "PackedMultiHeadAttention", "PackedAttention", "SparseAttention", "DecoderMaskedMultiHeadAttention"]);
const WINDOW = 1 << 16;

/** A forward reader over a file: varints and short fields read through a window, long ones skipped. */
class Reader {
  private buf = Buffer.alloc(WINDOW);
  private start = 0; // file offset of buf[0]
  private len = 0;
  pos = 0;
  constructor(
    private readonly fd: number,
    private readonly path: string,
    private readonly size: number,
  ) {}
  fail(detail: string): never {
    throw new OnnxFormatError(this.path, this.pos, detail);
  }

  private fill(at: number) {
    this.start = at;
    this.len = readSync(this.fd, this.buf, 0, WINDOW, at);
  }
  byte(): number {
    if (this.pos < this.start || this.pos >= this.start + this.len) {
      this.fill(this.pos);
      if (this.len === 0) this.fail("truncated: the file ends inside a field");
    }
    return this.buf[this.pos++ - this.start]!;
  }
  varint(): number {
    let v = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      const b = this.byte();
      v += (b & 0x7f) * mul;
      if (b < 0x80) return v;
      mul *= 128;
    }
    this.fail("a varint longer than 10 bytes");
  }
  /** `n` bytes read whole (small messages): `n` is checked against the file's end before it is allocated. */
  bytes(n: number): Buffer {
    if (n > this.size - this.pos) this.fail(`a field of ${n} bytes runs past the end of the file (${this.size} bytes)`);
    const out = Buffer.alloc(n);
    readSync(this.fd, out, 0, n, this.pos);
    this.pos += n;
    return out;
  }
  skip(wire: number) {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) {
      const n = this.varint(); // before reading pos: `pos += varint()` would add to the old pos
      this.pos += n;
    }
    else if (wire === 5) this.pos += 4;
    else this.fail(`unsupported protobuf wire type ${wire}`);
  }
}

/** A message held in memory that does not parse: its own bounds, not the file's (reported with the file by readGraphSummary). */
class MessageError extends Error {}

/** Fields of a message held in memory (small messages: value infos, external data entries). */
function* fields(b: Buffer): Generator<{ field: number; wire: number; value: number; body: Buffer }> {
  let at = 0;
  const varint = () => {
    let v = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      // past the end, b[at] is undefined: the loop would never end
      if (at >= b.length) throw new MessageError(`a message of ${b.length} bytes ends inside a varint`);
      const x = b[at++]!;
      v += (x & 0x7f) * mul;
      if (x < 0x80) return v;
      mul *= 128;
    }
    throw new MessageError("a varint longer than 10 bytes");
  };
  while (at < b.length) {
    const tag = varint();
    const wire = tag & 7;
    const field = Math.floor(tag / 8);
    if (wire === 0) yield { field, wire, value: varint(), body: Buffer.alloc(0) };
    else if (wire === 2) {
      const n = varint();
      if (n > b.length - at) throw new MessageError(`a field of ${n} bytes in a message of ${b.length}`);
      yield { field, wire, value: n, body: b.subarray(at, at + n) };
      at += n;
    } else if (wire === 1 || wire === 5) {
      at += wire === 1 ? 8 : 4;
    } else throw new MessageError(`unsupported protobuf wire type ${wire}`);
  }
}

function packedVarints(b: Buffer): number[] {
  const out: number[] = [];
  let v = 0;
  let mul = 1;
  for (const x of b) {
    v += (x & 0x7f) * mul;
    mul *= 128;
    if (x < 0x80) {
      out.push(v);
      v = 0;
      mul = 1;
    }
  }
  return out;
}

function valueInfo(b: Buffer): GraphValue {
  const v: GraphValue = { name: "", elemType: 0, dims: [] };
  for (const f of fields(b)) {
    if (f.field === 1 && f.wire === 2) v.name = f.body.toString("utf8");
    if (f.field !== 2 || f.wire !== 2) continue;
    for (const t of fields(f.body)) {
      if (t.field !== 1 || t.wire !== 2) continue; // tensor_type
      for (const tt of fields(t.body)) {
        if (tt.field === 1 && tt.wire === 0) v.elemType = tt.value;
        if (tt.field === 2 && tt.wire === 2)
          for (const d of fields(tt.body)) {
            if (d.field !== 1 || d.wire !== 2) continue;
            let dim: number | null = null;
            for (const x of fields(d.body)) if (x.field === 1 && x.wire === 0) dim = x.value;
            v.dims.push(dim);
          }
      }
    }
  }
  return v;
}

/** Reads `path`'s graph summary. Throws on a file that is not protobuf. */
export function readGraphSummary(path: string): GraphSummary {
  const fd = openSync(path, "r");
  const size = fstatSync(fd).size;
  const r = new Reader(fd, path, size);
  try {
    const out: GraphSummary = { externalFiles: [], inputs: [], outputs: [], fusedAttention: false, softmax: 0, convWidths: [], maxRows: 0 };
    const external = new Set<string>();
    const convs = new Set<number>();
    while (r.pos < size) {
      const tag = r.varint();
      if (tag >>> 3 !== 7 || (tag & 7) !== 2) {
        r.skip(tag & 7);
        continue;
      }
      const length = r.varint();
      const end = r.pos + length;
      while (r.pos < end) {
        const t = r.varint();
        const field = Math.floor(t / 8);
        const wire = t & 7;
        if (wire !== 2) {
          r.skip(wire);
          continue;
        }
        const n = r.varint();
        const bodyEnd = r.pos + n;
        if (field === 1) {
          // node: only op_type (field 4) matters; attributes and the rest are skipped
          while (r.pos < bodyEnd) {
            const nt = r.varint();
            if (nt === (4 << 3) + 2) {
              const op = r.bytes(r.varint()).toString("utf8");
              if (FUSED.has(op)) out.fusedAttention = true;
              if (op === "Softmax") out.softmax++;
            } else r.skip(nt & 7);
          }
        } else if (field === 5) {
          // initializer: dims (field 1) and external_data entries (field 13); data is skipped
          const dims: number[] = [];
          while (r.pos < bodyEnd) {
            const it = r.varint();
            if (it === (1 << 3) + 0) dims.push(r.varint());
            else if (it === (1 << 3) + 2) {
              const packed = r.bytes(r.varint());
              dims.push(...packedVarints(packed));
            } else if (it === (13 << 3) + 2) {
              const entry = r.bytes(r.varint());
              let key = "";
              let value = "";
              for (const f of fields(entry)) {
                if (f.field === 1 && f.wire === 2) key = f.body.toString("utf8");
                if (f.field === 2 && f.wire === 2) value = f.body.toString("utf8");
              }
              if (key === "location" && value) external.add(value);
            } else r.skip(it & 7);
          }
          if (dims.length === 4) convs.add(dims[0]!);
          if (dims.length === 2 || dims.length === 3) out.maxRows = Math.max(out.maxRows, dims[0]!);
        } else if (field === 11 || field === 12) {
          (field === 11 ? out.inputs : out.outputs).push(valueInfo(r.bytes(n)));
        }
        r.pos = bodyEnd;
      }
      r.pos = end;
    }
    out.externalFiles = [...external];
    out.convWidths = [...convs].sort((a, b) => a - b);
    return out;
  } catch (e) {
    if (e instanceof MessageError) throw new OnnxFormatError(path, r.pos, `in the message that ends here: ${e.message}`);
    throw e;
  } finally {
    closeSync(fd);
  }
}
