import { afterAll, beforeEach, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { cudaPreloadOrder } from "../../src/3-engines/cuda-preload";
import { cudaLibFolders, cudaLibsFixCommand, installCudaLibs } from "../../src/ops/build/cuda-libs";
import { CUDA_DESTINATIONS, CUDA_MANIFEST, type CudaDestination, type CudaManifest } from "../../src/ops/build/cuda-libs-manifest";
import { preloadCudaLibs } from "../../src/3-engines/cuda-preload";
import { tempDir } from "../helpers/app";

// Stand-in archives with the layout of NVIDIA's redistributables (`<name>-archive/lib/...`, with
// the soname links and a lib/stubs/ that must never be taken) and of onnxruntime's GPU tarball,
// served by a local HTTP server that can cut a download short once and honours Range.

const root = tempDir("appliance-cuda-libs-");
afterAll(() => {
  server.close();
  rmSync(root, { recursive: true, force: true });
});

function makeArchive(file: string, top: string, files: Record<string, string>, links: Record<string, string>, flag: string): { path: string; sha256: string; size: number } {
  const src = join(root, "src", file);
  for (const [rel, body] of Object.entries(files)) {
    mkdirSync(join(src, top, rel, ".."), { recursive: true });
    writeFileSync(join(src, top, rel), body);
  }
  for (const [rel, target] of Object.entries(links)) symlinkSync(target, join(src, top, rel));
  const out = join(root, "archives", file);
  mkdirSync(join(root, "archives"), { recursive: true });
  const r = Bun.spawnSync(["tar", flag, "-cf", out, "-C", src, top]);
  if (r.exitCode !== 0) throw new Error(r.stderr.toString());
  const bytes = readFileSync(out);
  return { path: out, sha256: createHash("sha256").update(bytes).digest("hex"), size: bytes.length };
}

// Incompressible bodies, so the archives are big enough to be cut mid-file.
const noise = (n: number) => Buffer.from(crypto.getRandomValues(new Uint8Array(n))).toString("base64");
const cudart = makeArchive(
  "cuda_cudart-linux-x86_64-13.1.80-archive.tar.xz",
  "cuda_cudart-linux-x86_64-13.1.80-archive",
  { "lib/libcudart.so.13.1.80": `cudart ${noise(96 * 1024)}`, "lib/stubs/libcuda.so": "stub", "include/cuda_runtime.h": "header" },
  { "lib/libcudart.so.13": "libcudart.so.13.1.80", "lib/libcudart.so": "libcudart.so.13" },
  "-cJ",
);
const cublas = makeArchive(
  "libcublas-linux-x86_64-13.2.0.9-archive.tar.xz",
  "libcublas-linux-x86_64-13.2.0.9-archive",
  { "lib/libcublas.so.13.2.0.9": "cublas", "lib/libcublasLt.so.13.2.0.9": "cublasLt", "lib/stubs/libcublas.so": "stub", "lib/libcublas_static.a": "static", "include/cublas_v2.h": "v2 header", "include/cublas_api.h": "api header", "include/nvblas.h": "not wanted" },
  { "lib/libcublas.so.13": "libcublas.so.13.2.0.9", "lib/libcublasLt.so.13": "libcublasLt.so.13.2.0.9" },
  "-cJ",
);
const ort = makeArchive(
  "onnxruntime-linux-x64-gpu_cuda13-1.30.0.tgz",
  "onnxruntime-linux-x64-gpu_cuda13-1.30.0",
  { "lib/libonnxruntime_providers_cuda.so": "provider", "lib/libonnxruntime_providers_shared.so": "shared", "lib/libonnxruntime.so.1.30.0": "ort" },
  { "lib/libonnxruntime.so.1": "libonnxruntime.so.1.30.0" },
  "-cz",
);

function manifest(over: Partial<Record<"cudart" | "cublas" | "ort", string | undefined>> = {}): CudaManifest {
  const url = (f: string) => `https://example.invalid/${f}`;
  return {
    id: "test",
    archives: [
      { name: "cudart", file: "cuda_cudart-linux-x86_64-13.1.80-archive.tar.xz", url: url("cudart"), sha256: "cudart" in over ? over.cudart : cudart.sha256, source: "test", root: "cuda_cudart-linux-x86_64-13.1.80-archive", take: ["lib/libcudart.so.13*"], provides: ["libcudart.so.13"], to: ["llama", "onnx"] },
      { name: "cublas", file: "libcublas-linux-x86_64-13.2.0.9-archive.tar.xz", url: url("cublas"), sha256: "cublas" in over ? over.cublas : cublas.sha256, source: "test", root: "libcublas-linux-x86_64-13.2.0.9-archive", take: ["lib/libcublas.so.13*", "lib/libcublasLt.so.13*"], headers: ["include/cublas*.h"], provides: ["libcublas.so.13", "libcublasLt.so.13"], to: ["llama", "onnx", "llamaSource"] },
      { name: "ort", file: "onnxruntime-linux-x64-gpu_cuda13-1.30.0.tgz", url: url("ort"), sha256: "ort" in over ? over.ort : ort.sha256, source: "test", root: "onnxruntime-linux-x64-gpu_cuda13-1.30.0", take: ["lib/libonnxruntime_providers_cuda.so", "lib/libonnxruntime_providers_shared.so"], provides: ["libonnxruntime_providers_cuda.so"], to: ["onnx"] },
    ],
  };
}

// The server: every request recorded; `cutOnce` files are cut after `cutAt` bytes the first time
// (headers promise the whole file, the socket is destroyed once the first bytes are written).
const requests: { file: string; range: string | null }[] = [];
const cutOnce = new Set<string>();
const cutAt = 40 * 1024;
const server = createServer((req, res) => {
  const file = decodeURIComponent(new URL(req.url!, "http://x").pathname.slice(1));
  const range = req.headers.range ?? null;
  requests.push({ file, range });
  const path = join(root, "archives", file);
  if (!existsSync(path)) return res.writeHead(404).end("not found");
  const bytes = readFileSync(path);
  if (cutOnce.delete(file)) {
    res.writeHead(200, { "content-length": bytes.length });
    res.write(bytes.subarray(0, cutAt), () => setTimeout(() => res.socket?.destroy(), 20));
    return;
  }
  const m = range ? /^bytes=(\d+)-$/.exec(range) : null;
  if (m) {
    const from = Number(m[1]);
    res.writeHead(206, { "content-range": `bytes ${from}-${bytes.length - 1}/${bytes.length}`, "content-length": bytes.length - from });
    return res.end(bytes.subarray(from));
  }
  res.writeHead(200, { "content-length": bytes.length }).end(bytes);
});
await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

let lib = "";
let cache = "";
let n = 0;
beforeEach(() => {
  n++;
  lib = join(root, `lib-${n}`);
  cache = join(root, `cache-${n}`);
  for (const d of Object.values(CUDA_DESTINATIONS)) mkdirSync(join(lib, d), { recursive: true });
  writeFileSync(join(lib, CUDA_DESTINATIONS.onnx, "libonnxruntime.so.1"), "cpu build");
  requests.length = 0;
  cutOnce.clear();
});

const lines: string[] = [];
const install = (o: Partial<Parameters<typeof installCudaLibs>[0]> = {}) => installCudaLibs({ lib, cache, baseUrl, manifest: manifest(), log: (l) => lines.push(l), ...o });

/** Sonames the manifest provides that are missing from a destination (a destination folder that is not shipped is skipped). */
function missingCudaLibs(lib: string, manifest = CUDA_MANIFEST): { for: CudaDestination; dir: string; missing: string[] }[] {
  const out: { for: CudaDestination; dir: string; missing: string[] }[] = [];
  for (const d of Object.keys(CUDA_DESTINATIONS) as CudaDestination[]) {
    const dir = join(lib, CUDA_DESTINATIONS[d]);
    if (!existsSync(dir)) continue;
    const wanted = manifest.archives.filter((a) => a.to.includes(d)).flatMap((a) => a.provides);
    const missing = wanted.filter((so) => !existsSync(join(dir, so)));
    if (missing.length) out.push({ for: d, dir, missing });
  }
  return out;
}

test("installs the chosen files into lib/cuda with their soname links, and links them beside libggml-cuda.so and libonnxruntime.so.1", async () => {
  const r = await install();
  expect(r.installed).toBe(true);
  const cuda = join(lib, "cuda");
  expect(readdirSync(cuda).sort()).toEqual(
    ["include", "installed.json", "libcublas.so.13", "libcublas.so.13.2.0.9", "libcublasLt.so.13", "libcublasLt.so.13.2.0.9", "libcudart.so.13", "libcudart.so.13.1.80", "libonnxruntime_providers_cuda.so", "libonnxruntime_providers_shared.so"].sort(),
  );
  // cuBLAS's headers, for a CUDA source build where the host's toolkit has none (cuda-source.ts): kept, never linked beside a library.
  expect(readdirSync(join(cuda, "include")).sort()).toEqual(["cublas_api.h", "cublas_v2.h"]);
  expect(readFileSync(join(cuda, "include", "cublas_v2.h"), "utf8")).toBe("v2 header");
  expect(existsSync(join(lib, CUDA_DESTINATIONS.llama, "cublas_v2.h"))).toBe(false);
  // The source build's folder gets cuBLAS beside its libggml-cuda.so too.
  expect(realpathSync(join(lib, CUDA_DESTINATIONS.llamaSource, "libcublas.so.13"))).toBe(realpathSync(join(cuda, "libcublas.so.13.2.0.9")));
  expect(readlinkSync(join(cuda, "libcudart.so.13"))).toBe("libcudart.so.13.1.80"); // the soname link kept as a link
  expect(readFileSync(join(cuda, "libcublas.so.13"), "utf8")).toBe("cublas"); // never the stub
  const llama = join(lib, CUDA_DESTINATIONS.llama);
  expect(lstatSync(join(llama, "libcudart.so.13")).isSymbolicLink()).toBe(true);
  expect(realpathSync(join(llama, "libcudart.so.13"))).toBe(realpathSync(join(cuda, "libcudart.so.13.1.80")));
  expect(readFileSync(join(llama, "libcublasLt.so.13"), "utf8")).toBe("cublasLt");
  expect(existsSync(join(llama, "libonnxruntime_providers_cuda.so"))).toBe(false); // onnx only
  const onnx = join(lib, CUDA_DESTINATIONS.onnx);
  expect(readFileSync(join(onnx, "libonnxruntime_providers_cuda.so"), "utf8")).toBe("provider");
  expect(readFileSync(join(onnx, "libcudart.so.13"), "utf8")).toStartWith("cudart ");
  expect(readFileSync(join(onnx, "libonnxruntime.so.1"), "utf8")).toBe("cpu build"); // the npm build stays
  expect(readdirSync(lib).filter((f) => f.startsWith("."))).toEqual([]); // no staging left
  expect(missingCudaLibs(lib, manifest())).toEqual([]);
  expect(cudaPreloadOrder(lib).map((p) => p.split("/").pop())).toEqual(["libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13"]);
});

test("a second run downloads and extracts nothing", async () => {
  await install();
  const before = statSync(join(lib, "cuda", "libcudart.so.13.1.80")).mtimeMs;
  requests.length = 0;
  lines.length = 0;
  const r = await install();
  expect(r.installed).toBe(false);
  expect(requests).toEqual([]);
  expect(statSync(join(lib, "cuda", "libcudart.so.13.1.80")).mtimeMs).toBe(before);
  expect(lines.join("\n")).toContain("already installed");
});

test("a download cut mid-file resumes with a Range request from where it stopped", async () => {
  cutOnce.add(cudart.path.split("/").pop()!);
  const r = await install();
  expect(r.installed).toBe(true);
  const tries = requests.filter((q) => q.file.startsWith("cuda_cudart"));
  expect(tries.length).toBe(2);
  expect(tries[0]!.range).toBeNull();
  expect(tries[1]!.range).toBe(`bytes=${cutAt}-`);
  expect(readFileSync(join(lib, "cuda", "libcudart.so.13.1.80"), "utf8")).toStartWith("cudart ");
  expect(readdirSync(cache).some((f) => f.endsWith(".partial"))).toBe(false);
});

test("a partial file left by an earlier run is resumed by the next one", async () => {
  cutOnce.add(cudart.path.split("/").pop()!);
  await expect(install({ attempts: 1 })).rejects.toThrow(/partial file is kept/);
  const partial = join(cache, "cuda_cudart-linux-x86_64-13.1.80-archive.tar.xz.partial");
  expect(statSync(partial).size).toBe(cutAt);
  expect(existsSync(join(lib, "cuda"))).toBe(false);
  requests.length = 0;
  await install();
  expect(requests.find((q) => q.file.startsWith("cuda_cudart"))!.range).toBe(`bytes=${cutAt}-`);
  expect(existsSync(join(lib, "cuda", "libcudart.so.13"))).toBe(true);
});

test("a wrong hash is refused naming the file and both hashes; the partial is deleted and nothing is installed", async () => {
  const wrong = "0".repeat(64);
  const err = await install({ manifest: manifest({ ort: wrong }) }).catch((e: Error) => e);
  expect(err).toBeInstanceOf(Error);
  expect((err as Error).message).toContain("onnxruntime-linux-x64-gpu_cuda13-1.30.0.tgz");
  expect((err as Error).message).toContain(wrong);
  expect((err as Error).message).toContain(ort.sha256);
  expect(existsSync(join(cache, "onnxruntime-linux-x64-gpu_cuda13-1.30.0.tgz.partial"))).toBe(false);
  expect(existsSync(join(lib, "cuda"))).toBe(false);
  expect(readdirSync(join(lib, CUDA_DESTINATIONS.llama))).toEqual([]); // cudart and cublas came in before; none linked
  expect(readdirSync(join(lib, CUDA_DESTINATIONS.onnx))).toEqual(["libonnxruntime.so.1"]);
  expect(readdirSync(lib).filter((f) => f.startsWith("."))).toEqual([]);
});

test("a failed update leaves the previous install as it was", async () => {
  await install();
  const m = manifest({ cublas: "f".repeat(64) });
  m.id = "newer";
  await expect(install({ manifest: m })).rejects.toThrow(/SHA-256 mismatch/);
  expect(readFileSync(join(lib, CUDA_DESTINATIONS.llama, "libcublas.so.13"), "utf8")).toBe("cublas");
  expect(JSON.parse(readFileSync(join(lib, "cuda", "installed.json"), "utf8")).id).toBe("test");
});

test("an entry without a pinned hash is refused before anything is downloaded", async () => {
  await expect(install({ manifest: manifest({ ort: undefined }) })).rejects.toThrow(/no SHA-256 for onnxruntime-linux-x64-gpu_cuda13-1\.30\.0\.tgz.*unchecked/);
  expect(requests).toEqual([]);
  expect(existsSync(join(lib, "cuda"))).toBe(false);
});

test("--cuda-libs DIR: archives from a folder, no network, same hash checks", async () => {
  const offline = join(root, "archives");
  const r = await install({ from: offline, baseUrl: "http://127.0.0.1:9/unreachable" });
  expect(r.installed).toBe(true);
  expect(requests).toEqual([]);
  expect(existsSync(join(lib, CUDA_DESTINATIONS.onnx, "libonnxruntime_providers_shared.so"))).toBe(true);
  expect(existsSync(cache)).toBe(false); // taken where they are, not copied

  rmSync(join(lib, "cuda"), { recursive: true });
  const bad = await install({ from: offline, manifest: manifest({ cudart: "1".repeat(64) }) }).catch((e: Error) => e);
  expect((bad as Error).message).toMatch(/cuda_cudart-linux-x86_64-13\.1\.80-archive\.tar\.xz: SHA-256 mismatch/);
  expect(existsSync(join(offline, "cuda_cudart-linux-x86_64-13.1.80-archive.tar.xz"))).toBe(true); // the user's file is left alone
  expect(existsSync(join(lib, "cuda"))).toBe(false);

  const missing = await install({ from: join(root, "empty") }).catch((e: Error) => e);
  expect((missing as Error).message).toContain("cuda_cudart-linux-x86_64-13.1.80-archive.tar.xz is not in");
});

test("without node-llama-cpp's CUDA package in lib/, the onnx side is still installed", async () => {
  rmSync(join(lib, "@node-llama-cpp"), { recursive: true });
  await install();
  expect(existsSync(join(lib, CUDA_DESTINATIONS.onnx, "libcublas.so.13"))).toBe(true);
  expect(lines.join("\n")).toContain("node-llama-cpp is not shipped");
});

test("what doctor uses: the folders searched and the command that fixes it; before an install every destination lacks its libraries", () => {
  expect(cudaLibFolders(lib).map((f) => f.dir)).toEqual([join(lib, "cuda"), ...["llama", "onnx", "llamaSource", "llama12", "llamaFallback"].map((d) => join(lib, CUDA_DESTINATIONS[d as CudaDestination]))]);
  const missing = missingCudaLibs(lib);
  expect(missing.find((m) => m.for === "llama")!.missing).toEqual(expect.arrayContaining(["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"]));
  expect(missing.find((m) => m.for === "onnx")!.missing).toEqual(expect.arrayContaining(["libonnxruntime_providers_cuda.so", "libcudnn.so.9", "libcurand.so.10"]));
  // the CUDA 12 build's runtime, beside the library the executable assembles and beside its original
  for (const d of ["llama12", "llamaFallback"]) expect(missing.find((m) => m.for === d)!.missing).toEqual(["libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12"]);
  // and the CUDA 13 runtime beside the library built on this host (./install.sh --cuda-build)
  expect(missing.find((m) => m.for === "llamaSource")!.missing).toEqual(expect.arrayContaining(["libcudart.so.13", "libcublas.so.13"]));
  expect(cudaLibsFixCommand()).toContain("./install.sh --cuda");
  expect(cudaLibsFixCommand({ offline: true })).toContain("--cuda-libs DIR");
});

test("the real manifest pins a SHA-256 and a source for every archive, with NVIDIA's archive layout", () => {
  for (const a of CUDA_MANIFEST.archives) {
    expect(a.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(a.source.length).toBeGreaterThan(0);
    expect(a.url.endsWith(`/${a.file}`)).toBe(true);
    expect(a.file.startsWith(a.root)).toBe(true);
    expect(a.take.every((g) => g.startsWith("lib/") && !g.includes("stubs"))).toBe(true);
  }
});

test("preloading: a real library loads, a missing one is reported with the loader's message", () => {
  const libm = ["/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6"].find((p) => existsSync(p))!;
  expect(preloadCudaLibs([libm])).toEqual([]);
  const failed = preloadCudaLibs([join(root, "nope", "libcudart.so.13")]);
  expect(failed.length).toBe(1);
  expect(failed[0]!.error).toContain("libcudart.so.13");
});
