import { accessSync, constants, existsSync, readdirSync, readFileSync, statfsSync, statSync } from "node:fs";
import { createServer } from "node:net";
import { availableParallelism } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { chatRuntime } from "../../3-engines/llama/factory";
import { createLogger } from "../../lib/log";
import { planModels } from "../../3-engines/planner/plan-all";
import { createPlanner } from "../../3-engines/planner/planner";
import { chooseCudaBuild } from "../../3-engines/llama/cuda-probe";
import { builtAddon } from "../../3-engines/llama/native/addon-path";
import { COMPILED, CUDA_SOURCE_BINS, executableLibDir, installedPackageDir } from "../../3-engines/installed";
import { findNvcc } from "../build/cuda-source";
import { onnxRuntimeLibDir } from "../../3-engines/onnx-device";
import { spawnRunner } from "../../2-services/rentals/inventory";
import { probeStore } from "./store-probe";
import { readFdLimit } from "../../lib/net/rlimit";
import type { Probes } from "./check";

// The real machine behind Probes. Nothing here decides anything; the checks do.

export function systemProbes(env: Record<string, string | undefined> = process.env): Probes {
  return {
    run: spawnRunner,
    env,
    nvidiaDevice: () => existsSync("/dev/nvidiactl") || existsSync("/proc/driver/nvidia/version"),
    readdir(dir) {
      try {
        return readdirSync(dir);
      } catch {
        return [];
      }
    },
    kind(path) {
      try {
        const s = statSync(path);
        return s.isDirectory() ? "dir" : "file";
      } catch {
        return "missing";
      }
    },
    size: (path) => sizeOf(path, 0),
    writable(path) {
      try {
        accessSync(path, constants.W_OK);
        return true;
      } catch {
        return false;
      }
    },
    statfs(path) {
      const s = statfsSync(path);
      return { free: s.bavail * s.bsize, total: s.blocks * s.bsize };
    },
    readText(path) {
      try {
        return readFileSync(path, "utf8");
      } catch {
        return null;
      }
    },
    cores: () => availableParallelism(),
    fdLimit: readFdLimit,
    store: probeStore,
    listen: listenBriefly,
    llamaCuda,
    cudaSourceBuild,
    nvcc: () => {
      const t = findNvcc();
      return t ? { path: t.nvcc, version: t.version } : null;
    },
    cudaDecode: () => chooseCudaBuild(),
    llamaVulkan,
    onnxLibDir: onnxRuntimeLibDir,
    async memoryPlan(config, vulkan) {
      const logger = createLogger({ level: "error", write: () => {} });
      const planner = createPlanner(config, { logger, runtime: vulkan ? chatRuntime(config, logger) : undefined });
      const base = config.models_dir;
      return planModels(planner, config.models.map((m) => ({ manifest: m, file: (role: string) => (isAbsolute(m.files[role]!) ? m.files[role]! : resolve(base, m.files[role]!)) })));
    },
    addon() {
      try {
        return { path: builtAddon() };
      } catch (e) {
        return { path: null, error: (e as Error).message };
      }
    },
  };
}

/** A file's size, or a folder's files added up (model folders are a few levels deep at most). */
function sizeOf(path: string, depth: number): number {
  try {
    const s = statSync(path);
    if (!s.isDirectory()) return s.size;
    if (depth > 8) return 0;
    return readdirSync(path).reduce((n, f) => n + sizeOf(join(path, f), depth + 1), 0);
  } catch {
    return 0;
  }
}

/** Listens on host:port and closes at once: null when that worked, else the error code. */
export function listenBriefly(host: string, port: number): Promise<string | null> {
  return new Promise((done) => {
    const server = createServer();
    const timer = setTimeout(() => {
      server.close();
      done("ETIMEDOUT");
    }, 3_000);
    server.once("error", (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      done(e.code ?? e.message);
    });
    server.listen({ host, port, exclusive: true }, () => {
      clearTimeout(timer);
      server.close(() => done(null));
    });
  });
}

/**
 * node-llama-cpp's CUDA prebuilts where the engine loads them from (node_modules, or the
 * executable's lib/): `@node-llama-cpp/<platform>-<arch>-cuda` (CUDA 13) and its `-ext` package's
 * fallback (CUDA 12).
 */
/** The record the CUDA source build leaves beside its library (src/ops/build/cuda-source.ts); only the executable's lib/ has one. */
function cudaSourceBuild(): { archs: string[]; nvcc: string; built_at: string; dir: string } | null {
  const dir = join(executableLibDir(), CUDA_SOURCE_BINS, `${process.platform}-${process.arch}-cuda`);
  try {
    const r = JSON.parse(readFileSync(join(dir, "appliance-cuda-build.json"), "utf8")) as { archs: string[]; nvcc: string; built_at: string };
    return COMPILED ? { archs: r.archs, nvcc: r.nvcc, built_at: r.built_at, dir } : null;
  } catch {
    return null;
  }
}

function llamaCuda(): { primary: string | null; fallback: string | null } {
  const name = `${process.platform}-${process.arch}-cuda`;
  const find = (pkg: string, sub: string[]): string | null => {
    const root = installedPackageDir(pkg);
    const dir = root && join(root, "bins", name, ...sub);
    return dir && existsSync(join(dir, "libggml-cuda.so")) ? dir : null;
  };
  return { primary: find(`@node-llama-cpp/${name}`, []), fallback: find(`@node-llama-cpp/${name}-ext`, ["fallback"]) };
}

/** node-llama-cpp's Vulkan prebuilt (`@node-llama-cpp/<platform>-<arch>-vulkan`), where the engine loads it from. */
function llamaVulkan(): string | null {
  const name = `${process.platform}-${process.arch}-vulkan`;
  const root = installedPackageDir(`@node-llama-cpp/${name}`);
  const dir = root && join(root, "bins", name);
  return dir && existsSync(join(dir, "libggml-vulkan.so")) ? dir : null;
}
