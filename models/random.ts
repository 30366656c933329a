// Deterministic pseudo-random weights: a seeded 32-bit PRNG (xoshiro128**) and chunked sources of
// normal-ish values for the GGUF writer. Same seed + label -> same values, on every platform.

/** FNV-1a over the UTF-16 code units of `text`, then splitmix32 to spread the bits. */
export function hashSeed(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return splitmix32(h >>> 0);
}

function splitmix32(x: number): number {
  x = (x + 0x9e3779b9) | 0;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

/** xoshiro128**: small, fast, good enough statistical quality for random weights. */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number | string) {
    let s = typeof seed === "string" ? hashSeed(seed) : seed >>> 0;
    const next = () => (s = splitmix32(s));
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    if ((this.a | this.b | this.c | this.d) === 0) this.a = 1;
  }

  /** Next uniformly distributed uint32. */
  nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9);
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return result >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextU32() / 4294967296;
  }

  /**
   * Fills `out` with zero-mean values of standard deviation `std`, drawn from a triangular
   * distribution (sum of two 16-bit uniforms): normal-ish, bounded, one PRNG call per value.
   */
  fillNormalish(out: Float32Array, std: number, mean = 0): void {
    // (u1 + u2 - 1) with u ~ U(0,1) has variance 1/6.
    const scale = (std * Math.sqrt(6)) / 65536;
    const offset = mean - std * Math.sqrt(6) * (65535 / 65536);
    for (let i = 0; i < out.length; i++) {
      const r = this.nextU32();
      out[i] = ((r >>> 16) + (r & 0xffff)) * scale + offset;
    }
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/**
 * A chunked data source of `count` normal-ish values for the GGUF writer. The values depend only on
 * `seed`, not on `chunkSize`. Each yielded chunk reuses one buffer: consume it before the next.
 */
export function normalishSource(seed: string, count: number, std: number, mean = 0, chunkSize = 1 << 16): () => Iterable<Float32Array> {
  return function* () {
    const rng = new Rng(seed);
    const buf = new Float32Array(Math.min(chunkSize, count));
    let left = count;
    while (left > 0) {
      const n = Math.min(left, buf.length);
      const view = n === buf.length ? buf : buf.subarray(0, n);
      rng.fillNormalish(view, std, mean);
      yield view;
      left -= n;
    }
  };
}

/** A chunked data source of `count` copies of `value`. */
export function constantSource(count: number, value: number): () => Iterable<Float32Array> {
  return function* () {
    yield new Float32Array(count).fill(value);
  };
}

/** `source` with some values replaced: `edit(index, value)` gets each value's index in the whole tensor. */
export function editedSource(source: () => Iterable<Float32Array>, edit: (index: number, value: number) => number): () => Iterable<Float32Array> {
  return function* () {
    let at = 0;
    for (const chunk of source()) {
      for (let i = 0; i < chunk.length; i++) chunk[i] = edit(at + i, chunk[i]!);
      at += chunk.length;
      yield chunk;
    }
  };
}
