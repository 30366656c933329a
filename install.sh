#!/usr/bin/env bash
# Installs the appliance from this checkout:
#   - Bun from the npm registry when no bun is on PATH (nothing is fetched from outside the registry)
#   - the project's dependencies (bun install, from the lockfile)
#   - the multimodal addon for image input (llama.cpp's tools/mtmd from the source node-llama-cpp
#     ships, built with cmake and a C++ compiler; --no-vision skips it)
#   - `appliance` and `bun` commands under PREFIX/bin (default ~/.local)
# Safe to run again: every step checks what is already there.
set -euo pipefail

BUN_VERSION="1.4.5"
PREFIX="${HOME}/.local"
VISION=1

usage() {
  cat <<USAGE
usage: ./install.sh [--prefix DIR] [--no-vision]

  --prefix DIR   install under DIR (default ~/.local): DIR/bin/appliance, DIR/bin/bun
  --no-vision    do not build the multimodal addon (vision models then refuse to load)
USAGE
}

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { usage >&2; exit 2; }; PREFIX="$2"; shift 2 ;;
    --prefix=*) PREFIX="${1#--prefix=}"; shift ;;
    --no-vision) VISION=0; shift ;;
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

# 2b. Image input: llama.cpp's multimodal library and its binding, linked against node-llama-cpp's
#     own libraries (a few minutes the first time; skipped when already built).
if [ "$VISION" = 1 ]; then
  missing=""
  for tool in cmake git c++; do command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"; done
  [ -z "$missing" ] || die "building the multimodal addon needs:$missing (Debian: apt install cmake g++ git); or run with --no-vision"
  say "building the multimodal addon (image input)"
  (cd "$CHECKOUT" && "$BUN" src/engines/llama/vision/build.ts) || die "the multimodal addon did not build (see above); --no-vision skips it"
fi

# 3. The `appliance` command: runs the CLI of this checkout with this Bun.
LAUNCHER="$PREFIX/bin/appliance"
cat > "$LAUNCHER.tmp" <<LAUNCH
#!/bin/sh
# Installed by $CHECKOUT/install.sh
exec "$BUN" "$CHECKOUT/cli/main.ts" "\$@"
LAUNCH
chmod 755 "$LAUNCHER.tmp"
mv -f "$LAUNCHER.tmp" "$LAUNCHER"
"$LAUNCHER" --version >/dev/null || die "the installed appliance command does not run"
say "installed $LAUNCHER ($("$LAUNCHER" --version))"

case ":$PATH:" in
  *":$PREFIX/bin:"*) ;;
  *) say "note: $PREFIX/bin is not on your PATH; add it, or call $LAUNCHER directly" ;;
esac
say "start the server with: $LAUNCHER serve --demo"
