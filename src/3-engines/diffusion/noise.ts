// Seeded Gaussian noise for the first latents: the same seed gives the same noise on every
// platform and runtime (Bun, Node, a compiled binary). A 32-bit seed is spread by splitmix32 into
// the state of xoshiro128**; pairs of uniforms become pairs of normals by Box–Muller. Math.random
// is never used.

function splitmix32(x: number): number {
  x = (x + 0x9e3779b9) | 0;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

const rotl = (x: number, k: number) => (x << k) | (x >>> (32 - k));

export class SeededRandom {
  private s: Uint32Array;

  constructor(seed: number) {
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`seed must be a 32-bit unsigned integer, got ${seed}`);
    let z = seed;
    this.s = new Uint32Array(4).map(() => (z = splitmix32(z)));
    if (this.s.every((v) => v === 0)) this.s[0] = 1;
  }

  /** xoshiro128**: the next uniformly distributed uint32. */
  nextU32(): number {
    const s = this.s;
    const result = Math.imul(rotl(Math.imul(s[1]!, 5), 7), 9) >>> 0;
    const t = s[1]! << 9;
    s[2]! ^= s[0]!;
    s[3]! ^= s[1]!;
    s[1]! ^= s[2]!;
    s[0]! ^= s[3]!;
    s[2]! ^= t;
    s[3] = rotl(s[3]!, 11);
    return result;
  }
}

/** `count` independent standard normal values (float32) from `seed`. */
export function gaussianNoise(seed: number, count: number): Float32Array {
  const rng = new SeededRandom(seed);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i += 2) {
    const u1 = (rng.nextU32() + 1) / 4294967296; // (0, 1]: the logarithm stays finite
    const u2 = rng.nextU32() / 4294967296;
    const r = Math.sqrt(-2 * Math.log(u1));
    out[i] = r * Math.cos(2 * Math.PI * u2);
    if (i + 1 < count) out[i + 1] = r * Math.sin(2 * Math.PI * u2);
  }
  return out;
}
