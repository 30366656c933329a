#!/usr/bin/env bash
# Unpacks test/gpu/device-pack.ts's pack into this checkout, on a machine with no network and no Bun:
# Bun into node_modules/.bin/bun, the packages into node_modules/, llama.cpp's source where the
# builds look for it (node_modules/.appliance/mtmd/llama.cpp-<release>). xz where it is installed,
# else Python's lzma. device-check.sh runs it when node_modules is absent and a pack is here.
#   test/gpu/device-unpack.sh [PACK_DIR]      (default .cache/device-pack)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PACK=$(cd "${1:-$ROOT/.cache/device-pack}" && pwd)
[ -f "$PACK/manifest.json" ] || { echo "device-unpack: no pack in $PACK (bun test/gpu/device-pack.ts makes one)" >&2; exit 2; }

# unxz FILE: the file's bytes on stdout
if command -v xz >/dev/null; then
  unxz_to() { xz -dc "$1"; }
else
  unxz_to() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer, 1 << 20)' "$1"; }
fi
tag=$(sed -n 's/^ *"tag": "\([^"]*\)".*/\1/p' "$PACK/manifest.json" | head -n 1)
[ -n "$tag" ] || { echo "device-unpack: $PACK/manifest.json names no llama.cpp release" >&2; exit 2; }

SECONDS=0
mkdir -p "$ROOT/node_modules/.bin"
unxz_to "$PACK/node_modules.tar.xz" | tar -C "$ROOT" -xf -
src="$ROOT/node_modules/.appliance/mtmd/llama.cpp-$tag"
rm -rf "$src"
mkdir -p "$src"
unxz_to "$PACK/llama.cpp.tar.xz" | tar -C "$src" -xf -
unxz_to "$PACK/bun.xz" >"$ROOT/node_modules/.bin/bun.tmp"
chmod +x "$ROOT/node_modules/.bin/bun.tmp"
mv "$ROOT/node_modules/.bin/bun.tmp" "$ROOT/node_modules/.bin/bun"
echo "device-unpack: Bun $("$ROOT/node_modules/.bin/bun" --version), node_modules ($(du -sh "$ROOT/node_modules" | cut -f1)), llama.cpp $tag source; $SECONDS s"
