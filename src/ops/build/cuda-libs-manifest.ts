// The CUDA libraries `install.sh --cuda` fetches: pinned archives, each checked by SHA-256 before
// anything in it is used. One CUDA major (13) serves both engines:
// - node-llama-cpp 3.22.1's CUDA prebuilt (libggml-cuda.so) NEEDs libcudart.so.13 and
//   libcublas.so.13 (readelf -d), RUNPATH $ORIGIN: the files beside it are found. libcublas.so.13
//   finds libcublasLt.so.13 through its own RUNPATH $ORIGIN.
// - onnxruntime 1.30.0 ships its CUDA provider for CUDA 12 and for CUDA 13 (release assets
//   onnxruntime-linux-x64-gpu_cuda12/_cuda13-1.30.0.tgz); the CUDA 13 provider NEEDs
//   libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libcurand.so.10 and uses cuDNN 9 built for
//   CUDA 13. It has no RUNPATH, so its libraries must be loaded before it (see cudaPreloadOrder in
//   cuda-libs.ts) or be on LD_LIBRARY_PATH.
// - Its -ext package's fallback libggml-cuda.so is a CUDA 12 build (NEEDs libcudart.so.12,
//   libcublas.so.12; PTX 8.4 for sm_50…80): the executable assembles it into a build of its own
//   (llama-cuda12/, src/ops/build/executable.ts) for GPUs whose driver cannot compile the CUDA 13
//   build's PTX (an H100 on driver 580.159: "PTX was compiled with an unsupported toolchain").
//   CUDA 12.8's runtime and cuBLAS serve it (any driver since R570).
// CUDA 13 needs an NVIDIA driver >= 580. The 13.1 set below is the one a public project documents
// as working with onnxruntime 1.30.0's CUDA 13 provider (pimesh tools/fetch-gpu-stack.sh).
//
// Hash sources (every hash was found in public material naming the exact file; "2+" = agreeing
// copies in independent places):
//   cudart 13.1.80    3: pimesh fetch-gpu-stack.sh; a copy of NVIDIA's redistrib_13.1.1.json in a
//                        fly.io CUDA script (with its size); a Python PackageSpec list (with size)
//   cuBLAS 13.2.0.9   1: pimesh fetch-gpu-stack.sh
//   cuRAND 10.4.1.34  1: pimesh fetch-gpu-stack.sh
//   NVRTC 13.1.80     1: pimesh fetch-gpu-stack.sh
//   nvJitLink 13.1.80 1: pimesh fetch-gpu-stack.sh
//   cudart 12.8.90    3+: a Gradle CUDA runtime task, a Dart CUDA toolkit installer, a JS
//                        llama.cpp CUDA packaging script, a model card's dependency table
//   cuBLAS 12.8.4.1   4: the same Gradle task, Dart installer and JS script, and a pinned
//                        llama.cpp build script (forge8)
//   cuDNN 9.26.0.51   2: pimesh fetch-gpu-stack.sh; a Rust downloads manifest pinned from NVIDIA's
//                        cuDNN 9.26.0 redistrib json (with its size)
//   onnxruntime 1.30.0 gpu_cuda13 tgz  5+: RapidRAW docs, a Dockerfile, a CMake script, a Go
//                        checksum table, pimesh, a build script

/** Where installed files are linked, relative to the executable's lib/ folder. */
export const CUDA_DESTINATIONS = {
  /** Beside libggml-cuda.so of node-llama-cpp's CUDA prebuilt (RUNPATH $ORIGIN). */
  llama: "@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda",
  /** Beside libonnxruntime.so.1: where onnxruntime looks for its provider libraries. */
  onnx: "onnxruntime-node/bin/napi-v6/linux/x64",
  /** Beside the libggml-cuda.so built on this host (./install.sh --cuda-build, src/ops/build/cuda-source.ts). */
  llamaSource: "llama-cuda-source/bins/linux-x64-cuda",
  /** Beside the CUDA 12 libggml-cuda.so the executable assembles (llama-cuda12/, links into -ext). */
  llama12: "llama-cuda12/bins/linux-x64-cuda",
  /** Beside that library's own file in the -ext package, where node-llama-cpp itself falls back to it. */
  llamaFallback: "@node-llama-cpp/linux-x64-cuda-ext/bins/linux-x64-cuda/fallback",
} as const;
export type CudaDestination = keyof typeof CUDA_DESTINATIONS;

export interface CudaArchive {
  /** A short name for progress lines. */
  name: string;
  /** The archive's file name: the cache entry, and the name looked for under --cuda-libs DIR. */
  file: string;
  url: string;
  /** SHA-256 of the whole archive; an entry without one is refused, never downloaded unchecked. */
  sha256?: string;
  size?: number;
  /** Where the hash comes from (public material naming this exact file). */
  source: string;
  /** The archive's top folder. */
  root: string;
  /** Files to take, as globs relative to root ("lib/libcudart.so.13*"); symlinks are kept. */
  take: string[];
  /**
   * Headers to take into lib/cuda/include (globs relative to root): what a CUDA source build of
   * llama.cpp compiles against where the host's toolkit has no cuBLAS (src/ops/build/cuda-source.ts).
   */
  headers?: string[];
  /** Sonames that must be there once taken (checked before anything is installed). */
  provides: string[];
  /** The folders that get a link to each taken file. */
  to: CudaDestination[];
}

export interface CudaManifest {
  /** Bumped with any change below: an install stamped with another id is redone. */
  id: string;
  archives: CudaArchive[];
}

const NV = "https://developer.download.nvidia.com/compute";

function nvidia(component: string, base: "cuda" | "cudnn", file: string): Pick<CudaArchive, "file" | "url" | "root"> {
  return { file, url: `${NV}/${base}/redist/${component}/linux-x86_64/${file}`, root: file.replace(/\.tar\.xz$/, "") };
}

export const CUDA_MANIFEST: CudaManifest = {
  id: "cuda13.1-cuda12.8-cudnn9.26-ort1.30.0",
  archives: [
    {
      name: "CUDA runtime 13.1.80",
      ...nvidia("cuda_cudart", "cuda", "cuda_cudart-linux-x86_64-13.1.80-archive.tar.xz"),
      sha256: "b626f4790f46bc9324a1047f2fbcc9a42bc4a722b053056e61cc00da54ad6f32",
      size: 1_549_648,
      source: "NVIDIA redistrib_13.1.1.json (copies: pimesh tools/fetch-gpu-stack.sh, a fly.io CUDA setup script, a Python PackageSpec list)",
      take: ["lib/libcudart.so.13*"],
      provides: ["libcudart.so.13"],
      to: ["llama", "onnx", "llamaSource"],
    },
    {
      name: "cuBLAS 13.2.0.9",
      ...nvidia("libcublas", "cuda", "libcublas-linux-x86_64-13.2.0.9-archive.tar.xz"),
      sha256: "e23c85f0d80b0c8af5e76a87dc400a123f455e4a603524ed6219616c33283cda",
      source: "pimesh tools/fetch-gpu-stack.sh (one source)",
      take: ["lib/libcublas.so.13*", "lib/libcublasLt.so.13*"],
      headers: ["include/cublas*.h"],
      provides: ["libcublas.so.13", "libcublasLt.so.13"],
      to: ["llama", "onnx", "llamaSource"],
    },
    {
      // cuBLAS compiles kernels at run time for shapes it has no precompiled code for.
      name: "NVRTC 13.1.80",
      ...nvidia("cuda_nvrtc", "cuda", "cuda_nvrtc-linux-x86_64-13.1.80-archive.tar.xz"),
      sha256: "e4250fe1b8d02fa324ecae50777ba6d23a74712a2a23eb6233fced170de876af",
      source: "pimesh tools/fetch-gpu-stack.sh (one source)",
      take: ["lib/libnvrtc.so.13*", "lib/libnvrtc-builtins.so.13*"],
      provides: ["libnvrtc.so.13"],
      to: ["llama", "onnx", "llamaSource"],
    },
    {
      name: "nvJitLink 13.1.80",
      ...nvidia("libnvjitlink", "cuda", "libnvjitlink-linux-x86_64-13.1.80-archive.tar.xz"),
      sha256: "850cba213192691046441b5334588daa796c3dbce71253131fbf3c77e29ca18d",
      source: "pimesh tools/fetch-gpu-stack.sh (one source)",
      take: ["lib/libnvJitLink.so.13*"],
      provides: ["libnvJitLink.so.13"],
      to: ["llama", "onnx", "llamaSource"],
    },
    {
      name: "cuRAND 10.4.1.34",
      ...nvidia("libcurand", "cuda", "libcurand-linux-x86_64-10.4.1.34-archive.tar.xz"),
      sha256: "447ed93a372162db3713777c01483bca6b0c6611f40540ac061d6d3b8669d58c",
      source: "pimesh tools/fetch-gpu-stack.sh (one source)",
      take: ["lib/libcurand.so.10*"],
      provides: ["libcurand.so.10"],
      to: ["onnx"],
    },
    {
      name: "cuDNN 9.26.0.51 (CUDA 13)",
      ...nvidia("cudnn", "cudnn", "cudnn-linux-x86_64-9.26.0.51_cuda13-archive.tar.xz"),
      sha256: "e62c9b4af62ea130765ea5b13244c05c9452edf1690072373d193d19766d9850",
      size: 909_961_620,
      source: "NVIDIA cuDNN 9.26.0 redistrib json (copies: pimesh tools/fetch-gpu-stack.sh, a Rust downloads manifest with the size)",
      take: ["lib/libcudnn*.so.9*"],
      provides: ["libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9", "libcudnn_heuristic.so.9", "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9"],
      to: ["onnx"],
    },
    {
      name: "CUDA runtime 12.8.90",
      ...nvidia("cuda_cudart", "cuda", "cuda_cudart-linux-x86_64-12.8.90-archive.tar.xz"),
      sha256: "8d566b5fe745c46842dc16945cf36686227536decd2302c372be86da37faca68",
      source: "NVIDIA redistrib_12.8.1.json (copies: a Gradle CUDA runtime task, a Dart CUDA toolkit installer, a JS llama.cpp packaging script)",
      take: ["lib/libcudart.so.12*"],
      provides: ["libcudart.so.12"],
      to: ["llama12", "llamaFallback"],
    },
    {
      name: "cuBLAS 12.8.4.1",
      ...nvidia("libcublas", "cuda", "libcublas-linux-x86_64-12.8.4.1-archive.tar.xz"),
      sha256: "21718957c2cf000bacd69d36c95708a2319199e39e056f8b4f0f68e3b9f323bb",
      source: "NVIDIA redistrib_12.8.1.json (copies: a Gradle CUDA runtime task, a Dart CUDA toolkit installer, a JS llama.cpp packaging script, a llama.cpp build script)",
      take: ["lib/libcublas.so.12*", "lib/libcublasLt.so.12*"],
      provides: ["libcublas.so.12", "libcublasLt.so.12"],
      to: ["llama12", "llamaFallback"],
    },
    {
      name: "onnxruntime 1.30.0 CUDA 13 provider",
      file: "onnxruntime-linux-x64-gpu_cuda13-1.30.0.tgz",
      url: "https://github.com/microsoft/onnxruntime/releases/download/v1.30.0/onnxruntime-linux-x64-gpu_cuda13-1.30.0.tgz",
      root: "onnxruntime-linux-x64-gpu_cuda13-1.30.0",
      sha256: "382d79133112388cf94ce5855789b7c9bef12bef76a08b6b277e5a317213adcd",
      source: "GitHub release asset digest, as pinned by RapidRAW docs, a Dockerfile, an automix CMake script, a Go checksum table and pimesh",
      take: ["lib/libonnxruntime_providers_cuda.so", "lib/libonnxruntime_providers_shared.so"],
      provides: ["libonnxruntime_providers_cuda.so", "libonnxruntime_providers_shared.so"],
      to: ["onnx"],
    },
  ],
};
