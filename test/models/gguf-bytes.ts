// Hand-made GGUF bytes for the header checker's tests: any count, length, type or offset can be
// written, whatever it claims (models/gguf/writer.ts writes only valid files).

export class GgufBytes {
  private readonly chunks: number[] = [];

  get length(): number {
    return this.chunks.length;
  }
  raw(bytes: ArrayLike<number>): this {
    for (let i = 0; i < bytes.length; i++) this.chunks.push(bytes[i]!);
    return this;
  }
  u32(v: number): this {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v >>> 0);
    return this.raw(b);
  }
  u64(v: number | bigint): this {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    return this.raw(b);
  }
  /** A string with its true length, or `claimed` as the length field. */
  str(s: string, claimed?: number | bigint): this {
    const body = Buffer.from(s, "utf8");
    return this.u64(claimed ?? body.length).raw(body);
  }
  header(o: { tensors: number | bigint; kvs: number | bigint; version?: number; magic?: string }): this {
    return this.raw(Buffer.from(o.magic ?? "GGUF", "latin1")).u32(o.version ?? 3).u64(o.tensors).u64(o.kvs);
  }
  kvU32(key: string, v: number): this {
    return this.str(key).u32(4).u32(v);
  }
  kvStr(key: string, v: string): this {
    return this.str(key).u32(8).str(v);
  }
  /** A tensor info: name, dims (ggml order), ggml type, data offset. */
  tensor(name: string, dims: (number | bigint)[], type: number, offset: number | bigint): this {
    this.str(name).u32(dims.length);
    for (const d of dims) this.u64(d);
    return this.u32(type).u64(offset);
  }
  /** Zeros up to the next multiple of `alignment`. */
  pad(alignment = 32): this {
    while (this.chunks.length % alignment) this.chunks.push(0);
    return this;
  }
  zeros(n: number): this {
    for (let i = 0; i < n; i++) this.chunks.push(0);
    return this;
  }
  bytes(): Uint8Array<ArrayBuffer> {
    return new Uint8Array(this.chunks);
  }
}

/** A small valid GGUF: two F32 tensors of 8 and 4 elements, 32-byte aligned; `name` (general.name) tells copies apart. */
export function validGguf(name?: string): Uint8Array<ArrayBuffer> {
  const b = new GgufBytes().header({ tensors: 2, kvs: name === undefined ? 2 : 3 });
  if (name !== undefined) b.kvStr("general.name", name);
  return b
    .kvStr("general.architecture", "llama")
    .kvU32("general.alignment", 32)
    .tensor("a", [8], 0, 0)
    .tensor("b", [4], 0, 32)
    .pad()
    .zeros(48)
    .bytes();
}

/** The 24 bytes of the outside attack: a v3 header with no tensors and 2^63 key-value pairs. */
export function attackGguf(): Uint8Array<ArrayBuffer> {
  return new GgufBytes().header({ tensors: 0, kvs: 1n << 63n }).bytes();
}
