import { statSync } from "node:fs";
import type { Footprint } from "./types";

// Shared by the profiles: bytes per part on each side, turned into the planner's MB (2^20 bytes,
// rounded up part by part so the parts add up to gpuMb + cpuMb exactly), and a cache keyed by a
// file's path, size and mtime so a profile is parsed once per version of its file.

export const MiB = 1024 * 1024;

export interface Parts {
  weights: number;
  cache: number;
  compute: number;
  projector: number;
}

export const noParts = (): Parts => ({ weights: 0, cache: 0, compute: 0, projector: 0 });

const mb = (bytes: number) => Math.ceil(Math.max(0, bytes) / MiB);

/** Bytes on the GPU and in host RAM → MB. */
export function toFootprint(gpu: Parts, cpu: Parts): Footprint {
  const g = { weightsMb: mb(gpu.weights), cacheMb: mb(gpu.cache), computeMb: mb(gpu.compute), projectorMb: mb(gpu.projector) };
  const c = { weightsMb: mb(cpu.weights), cacheMb: mb(cpu.cache), computeMb: mb(cpu.compute), projectorMb: mb(cpu.projector) };
  const sum = (p: typeof g) => p.weightsMb + p.cacheMb + p.computeMb + p.projectorMb;
  return {
    gpuMb: sum(g),
    cpuMb: sum(c),
    parts: {
      weightsMb: g.weightsMb + c.weightsMb,
      cacheMb: g.cacheMb + c.cacheMb,
      computeMb: g.computeMb + c.computeMb,
      projectorMb: g.projectorMb + c.projectorMb,
    },
  };
}

/** path + size + mtime: a file replaced in place gets a new key. */
export function fileVersion(path: string): string {
  const s = statSync(path);
  return `${path}\0${s.size}\0${s.mtimeMs}`;
}

/** A bounded memo of promises: a failed computation is forgotten, so a later call tries again. */
export class VersionCache<V> {
  private readonly entries = new Map<string, Promise<V>>();
  constructor(private readonly limit = 64) {}

  get(key: string, make: () => Promise<V>): Promise<V> {
    const hit = this.entries.get(key);
    if (hit) {
      // most recently used last
      this.entries.delete(key);
      this.entries.set(key, hit);
      return hit;
    }
    const made = make();
    this.entries.set(key, made);
    made.catch(() => this.entries.delete(key));
    while (this.entries.size > this.limit) this.entries.delete(this.entries.keys().next().value!);
    return made;
  }
}
