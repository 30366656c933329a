#!/usr/bin/env bash
# Installs the appliance from this checkout:
#   - Bun from the npm registry when no bun is on PATH (nothing is fetched from outside the registry)
#   - the project's dependencies (bun install, from the lockfile)
#   - the appliance's llama.cpp addon: the chat engine's decode loop and CPU threadpool, image input
#     (llama.cpp's tools/mtmd) and JSON Schema grammars, from the source node-llama-cpp ships, built
#     with cmake and a C++ compiler (chat models do not load without it)
#   - the executable (`bun run build`: dist/appliance + dist/lib) installed under
#     PREFIX/lib/appliance/current, `appliance` and `bun` commands under PREFIX/bin (default ~/.local)
#   - a default config (~/.config/appliance/config.toml) and data dir, and with --systemd a unit
#   - on an NVIDIA host (or with --cuda): NVIDIA's redistributable CUDA 13 runtime, cuBLAS, cuDNN and
#     onnxruntime's CUDA provider (pinned, SHA-256 checked, resumable; src/ops/build/cuda-libs.ts) into
#     the installed lib/, so a host with only the driver runs on the GPU; --cuda-libs DIR offline
#   - a report of what the host offers CUDA
# Safe to run again: every step checks what is already there.
set -euo pipefail

BUN_VERSION="1.4.5"
PREFIX="${HOME}/.local"
CUDA=auto
CPU_ONLY=0
SYSTEMD=0
CUDA_LIBS_DIR=""
CUDA_BUILD=auto
CUDA_ARCH=""

usage() {
  cat <<USAGE
usage: ./install.sh [--prefix DIR] [--cuda | --cpu-only] [--cuda-libs DIR] [--cuda-build [--cuda-arch N]] [--systemd]

  --prefix DIR   install under DIR (default ~/.local): DIR/bin/appliance (the executable,
                 with its lib/ in DIR/lib/appliance/current), DIR/bin/bun
  --cuda         ship node-llama-cpp's CUDA backends and fetch the CUDA libraries they and
                 onnxruntime's CUDA provider load (default: only when an NVIDIA GPU is present)
  --cuda-libs DIR  as --cuda, taking those archives from DIR instead of downloading them
                 (offline hosts; \`bun src/ops/build/cuda-libs.ts --list\` names them)
  --cuda-build   as --cuda, and build llama.cpp's CUDA backend with this host's nvcc for this
                 host's GPUs (minutes; needs nvcc, cmake, ninja, cuBLAS: --cuda fetches it); done
                 by itself where nvcc is present and no prebuilt CUDA build decodes here
  --cuda-arch N  the GPU architectures to build for (90, or 90,89; default: nvidia-smi's)
  --cpu-only     ship the CPU backends only (no CUDA, no Vulkan; node-llama-cpp's Vulkan
                 build, ~70 MB, is shipped otherwise: any vendor's GPU with a Vulkan driver)
  --systemd      write a systemd unit (user unit; system unit when run as root)
USAGE
}

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { usage >&2; exit 2; }; PREFIX="$2"; shift 2 ;;
    --prefix=*) PREFIX="${1#--prefix=}"; shift ;;
    --no-vision) echo "install.sh: error: --no-vision is gone: every chat model decodes through the llama addon, which install.sh builds (cmake, g++, git)" >&2; exit 2 ;;
    --cuda) CUDA=1; shift ;;
    --cpu-only) CUDA=0; CPU_ONLY=1; shift ;;
    --cuda-libs) [ $# -ge 2 ] || { usage >&2; exit 2; }; CUDA_LIBS_DIR="$2"; CUDA=1; shift 2 ;;
    --cuda-libs=*) CUDA_LIBS_DIR="${1#--cuda-libs=}"; CUDA=1; shift ;;
    --cuda-build) CUDA=1; CUDA_BUILD=1; shift ;;
    --cuda-arch) [ $# -ge 2 ] || { usage >&2; exit 2; }; CUDA_ARCH="$2"; CUDA=1; CUDA_BUILD=1; shift 2 ;;
    --cuda-arch=*) CUDA_ARCH="${1#--cuda-arch=}"; CUDA=1; CUDA_BUILD=1; shift ;;
    --systemd) SYSTEMD=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
  esac
done

say() { printf '==> %s\n' "$*"; }
die() { printf 'install.sh: error: %s\n' "$*" >&2; exit 1; }

CHECKOUT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$PREFIX/bin" "$PREFIX/lib/appliance" || die "cannot create $PREFIX/bin"
PREFIX="$(cd "$PREFIX" && pwd)"

# 1. Bun: the one on PATH, else one installed earlier under PREFIX, else from the npm registry.
BUN=""
if command -v bun >/dev/null 2>&1; then
  BUN="$(command -v bun)"
elif [ -x "$PREFIX/lib/appliance/bun/node_modules/.bin/bun" ]; then
  BUN="$PREFIX/lib/appliance/bun/node_modules/.bin/bun"
else
  command -v npm >/dev/null 2>&1 || die "neither bun nor npm is installed; install Node.js (with npm) first"
  say "installing Bun ${BUN_VERSION} from the npm registry into $PREFIX/lib/appliance/bun"
  npm install --prefix "$PREFIX/lib/appliance/bun" --no-audit --no-fund --loglevel=error "bun@${BUN_VERSION}" \
    || die "npm could not install bun@${BUN_VERSION}"
  BUN="$PREFIX/lib/appliance/bun/node_modules/.bin/bun"
fi
BUN="$(readlink -f "$BUN")"
"$BUN" --version >/dev/null 2>&1 || die "bun at $BUN does not run"
say "using Bun $("$BUN" --version) at $BUN"
if [ ! -e "$PREFIX/bin/bun" ] || [ -L "$PREFIX/bin/bun" ]; then
  ln -sfn "$BUN" "$PREFIX/bin/bun"
fi

# 2. Dependencies, exactly as locked. Install scripts stay blocked (see bunfig.toml).
say "installing dependencies"
(cd "$CHECKOUT" && "$BUN" install --frozen-lockfile) || die "bun install failed"

# 2b. The llama addon (the chat decode loop, CPU threadpool, image input, grammars), linked against
#     node-llama-cpp's own libraries (a few minutes the first time; skipped when already built).
missing=""
for tool in cmake git c++; do command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"; done
[ -z "$missing" ] || die "building the llama addon needs:$missing (Debian: apt install cmake g++ git)"
say "building the llama addon (chat decode loop, CPU threadpool, image input, grammars)"
(cd "$CHECKOUT" && "$BUN" src/3-engines/llama/native/build.ts) || die "the llama addon did not build (see above)"


# 3. The executable: dist/appliance and dist/lib (node-llama-cpp's CUDA backends only where an
#    NVIDIA GPU is present, or with --cuda), installed under PREFIX/lib/appliance/current and linked
#    from PREFIX/bin/appliance. The previous install is replaced only once the new one runs.
BUILD_FLAGS=""
if [ "$CUDA" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then CUDA=1; else CUDA=0; fi
fi
if [ "$CPU_ONLY" = 1 ]; then BUILD_FLAGS="--cpu-only"; elif [ "$CUDA" != 1 ]; then BUILD_FLAGS="--no-cuda"; fi
case "$BUILD_FLAGS" in
  --cpu-only) say "building the executable (CPU backends only)" ;;
  --no-cuda) say "building the executable (CPU and Vulkan backends; --cuda adds CUDA)" ;;
  *) say "building the executable (CPU, Vulkan and CUDA backends)" ;;
esac
(cd "$CHECKOUT" && "$BUN" src/ops/build/executable.ts $BUILD_FLAGS) || die "the executable did not build (see above)"
DEST="$PREFIX/lib/appliance/current"
rm -rf "$DEST.new"
cp -R "$CHECKOUT/dist" "$DEST.new" || die "cannot copy the executable into $DEST.new"
# 3b. The CUDA libraries (lib/cuda, linked beside libggml-cuda.so and libonnxruntime.so.1). The
#     previous install's are carried over (hard links), so a second run fetches nothing. A failure
#     leaves the new install without them: everything then runs on the CPU.
if [ "$CUDA" = 1 ]; then
  if [ -d "$DEST/lib/cuda" ] && [ ! -e "$DEST.new/lib/cuda" ]; then
    cp -al "$DEST/lib/cuda" "$DEST.new/lib/cuda" 2>/dev/null || cp -a "$DEST/lib/cuda" "$DEST.new/lib/cuda" || rm -rf "$DEST.new/lib/cuda"
  fi
  if [ -n "$CUDA_LIBS_DIR" ]; then
    [ -d "$CUDA_LIBS_DIR" ] || die "--cuda-libs: $CUDA_LIBS_DIR is not a folder"
    CUDA_LIBS_DIR="$(cd "$CUDA_LIBS_DIR" && pwd)"
    say "installing the CUDA libraries from $CUDA_LIBS_DIR"
  else
    say "installing the CUDA libraries (NVIDIA's redistributables and onnxruntime's CUDA provider; about 2 GiB the first time, resumed if cut)"
  fi
  if ! (cd "$CHECKOUT" && "$BUN" src/ops/build/cuda-libs.ts --lib "$DEST.new/lib" ${CUDA_LIBS_DIR:+--from "$CUDA_LIBS_DIR"}); then
    say "warning: the CUDA libraries were not installed (see above): the engines run on the CPU until ./install.sh --cuda succeeds"
  fi
fi
# 3c. llama.cpp's CUDA backend built here (src/ops/build/cuda-source.ts): with --cuda-build, or by
#     itself where nvcc is present and neither prebuilt CUDA build decodes on this GPU (the same
#     decode test the server runs). Its build tree stays in ~/.cache/appliance/cuda-build, so a
#     second install recompiles nothing that did not change. A failure leaves the prebuilt builds.
if [ "$CUDA_BUILD" = 1 ]; then
  say "building llama.cpp's CUDA backend with this host's nvcc (several minutes; progress below)"
  if ! (cd "$CHECKOUT" && "$BUN" src/ops/build/cuda-source.ts --lib "$DEST.new/lib" ${CUDA_ARCH:+--cuda-arch "$CUDA_ARCH"}); then
    say "warning: the CUDA source build failed (see above): the prebuilt CUDA builds are used where they decode"
  fi
elif [ "$CUDA" = 1 ]; then
  # the rule (src/ops/build/cuda-source.ts autoBuildDecision): a GPU, nvcc (PATH, CUDA_HOME,
  # /usr/local/cuda*), and neither prebuilt build passing the decode probe; it says which and why
  if ! (cd "$CHECKOUT" && "$BUN" src/ops/build/cuda-source.ts --lib "$DEST.new/lib" --auto "$DEST.new/appliance"); then
    say "warning: the CUDA source build failed (see above): the prebuilt CUDA builds are used where they decode"
  fi
fi
"$DEST.new/appliance" --version >/dev/null 2>&1 || die "the built executable does not run: $DEST.new/appliance --version"
rm -rf "$DEST.old"
[ ! -e "$DEST" ] || mv "$DEST" "$DEST.old"
mv "$DEST.new" "$DEST"
rm -rf "$DEST.old"
ln -sfn "$DEST/appliance" "$PREFIX/bin/appliance"
LAUNCHER="$PREFIX/bin/appliance"
say "installed $LAUNCHER -> $DEST/appliance ($("$LAUNCHER" --version))"

# 4. A default config and data dir (kept when they exist).
CONFIG_HOME="${XDG_CONFIG_HOME:-$HOME/.config}/appliance"
DATA_HOME="${XDG_DATA_HOME:-$HOME/.local/share}/appliance"
mkdir -p "$CONFIG_HOME" "$DATA_HOME" || die "cannot create $CONFIG_HOME or $DATA_HOME"
CONFIG="$CONFIG_HOME/config.toml"
if [ ! -e "$CONFIG" ]; then
  cat > "$CONFIG.tmp" <<CONF
# appliance configuration (see the manual: web/docs/configuration.md, or Docs in the console). Written by install.sh; edit freely.
[server]
host = "127.0.0.1"        # 0.0.0.0 to serve the LAN
port = 8484
data_dir = "$DATA_HOME"

[engines]
device = "auto"           # auto | cpu | cuda

# Models: \`appliance models pull <id>\` downloads one and prints its [[models]] entry to paste here.
# Without models, \`appliance serve --demo\` serves the tiny generated demo set.
CONF
  mv "$CONFIG.tmp" "$CONFIG"
  say "wrote $CONFIG (data in $DATA_HOME)"
else
  say "keeping $CONFIG"
fi

# 5. Optionally a systemd unit (a user unit, or a system unit when run as root).
if [ "$SYSTEMD" = 1 ]; then
  if [ "$(id -u)" = 0 ]; then UNIT_DIR="/etc/systemd/system"; WANTED="multi-user.target"; CTL="systemctl"
  else UNIT_DIR="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"; WANTED="default.target"; CTL="systemctl --user"; fi
  UNIT_DIR="${APPLIANCE_SYSTEMD_DIR:-$UNIT_DIR}"   # packaging and tests write the unit elsewhere
  mkdir -p "$UNIT_DIR" || die "cannot create $UNIT_DIR"
  cat > "$UNIT_DIR/appliance.service.tmp" <<UNIT
[Unit]
Description=appliance: self-hosted inference and GPU rentals
After=network-online.target

[Service]
ExecStart=$DEST/appliance serve --config $CONFIG
Restart=on-failure
KillSignal=SIGTERM
TimeoutStopSec=60
# One descriptor per client connection; the server raises its soft limit to this at start.
LimitNOFILE=65536

[Install]
WantedBy=$WANTED
UNIT
  mv "$UNIT_DIR/appliance.service.tmp" "$UNIT_DIR/appliance.service"
  say "wrote $UNIT_DIR/appliance.service; start it with: $CTL daemon-reload && $CTL enable --now appliance"
fi

# 6. What this host offers CUDA (nothing here is required: without it everything runs on the CPU).
gpu_report() {
  if ! command -v nvidia-smi >/dev/null 2>&1; then say "GPU: no NVIDIA driver (nvidia-smi not found): engines run on the CPU"; return; fi
  local gpus driver cuda
  gpus="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | paste -sd ';' -)"
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1)"
  if [ -z "$gpus" ]; then say "GPU: nvidia-smi is present but lists no GPU (driver/library mismatch?)"; return; fi
  cuda="$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n1)"
  say "GPU: $gpus; driver $driver (supports CUDA ${cuda:-?})"
  local libs; libs="$( (ldconfig -p 2>/dev/null; for d in ${LD_LIBRARY_PATH//:/ } /usr/local/cuda/lib64 "$DEST/lib/cuda"; do ls "$d" 2>/dev/null; done) )"
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcudnn.so.9; do
    if grep -q "$lib" <<<"$libs"; then say "  present: $lib"; else say "  missing: $lib"; fi
  done
  say "  chat (llama.cpp) needs libcudart.so.13 + libcublas.so.13 (its CUDA 12 build: .so.12); ONNX models need those, cuRAND, cuDNN 9 and the onnxruntime CUDA provider (./install.sh --cuda installs them all)"
  local ort="$DEST/lib/onnxruntime-node/bin/napi-v6/linux/x64"
  if [ -e "$ort/libonnxruntime_providers_cuda.so" ]; then say "  present: onnxruntime CUDA provider"; else say "  missing: onnxruntime CUDA provider ($ort/libonnxruntime_providers_cuda.so)"; fi
  [ "$CUDA" = 1 ] || say "  note: the executable was built without CUDA (--cuda to include it)"
}
gpu_report

case ":$PATH:" in
  *":$PREFIX/bin:"*) ;;
  *) say "note: $PREFIX/bin is not on your PATH; add it, or call $LAUNCHER directly" ;;
esac
say "start the server with: $LAUNCHER serve --demo"
