#!/usr/bin/env bash
# The interop tests run the coding agents people point at the appliance (Claude Code, Codex CLI,
# opencode, pi, qwen-code, Continue CLI, Kilo CLI, Cline), their real binaries, against
# `serve --demo`. Together they weigh ~2 GB, so they are
# installed here, for the tests, at the versions pinned in test/interop/agents.json — never by a
# user's ./install.sh. Part of the README's test command; a second run with the same pins does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${APPLIANCE_AGENTS_DIR:-$PWD/.cache/agents}"
PINS_FILE=test/interop/agents.json
# "name@version name@version" from the pins file (node is on any machine that has npm).
PINS="$(node -e 'const p=require(process.argv[1]);console.log(Object.entries(p).map(([n,v])=>n+"@"+v).join(" "))' "$PWD/$PINS_FILE")"
STAMP="$DIR/.installed"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PINS" ]; then exit 0; fi
command -v npm >/dev/null || { echo "setup-agents: error: npm is needed to install $PINS" >&2; exit 1; }
echo "setup-agents: installing $PINS into $DIR for the interop tests (~2 GB, once)" >&2
rm -rf "$DIR.partial" && mkdir -p "$DIR.partial"
# The wrappers' install scripts only copy the platform package's binary; the tests run that binary
# from its platform package directly, so no script runs.
# shellcheck disable=SC2086
npm install --prefix "$DIR.partial" --no-save --no-audit --no-fund --loglevel=error --ignore-scripts $PINS >&2
# Every agent's binary must be there and run, or nothing is kept (test/interop/agents.ts finds them
# the same way). The native ones come in platform packages, so no install script is needed.
M="$DIR.partial/node_modules"
for bin in "$M"/@anthropic-ai/claude-code-linux-*/claude "$M"/@openai/codex-linux-*/vendor/*/bin/codex \
  "$M"/opencode-linux-x64/bin/opencode "$M"/@kilocode/cli-linux-x64/bin/kilo \
  "$M"/.bin/pi "$M"/.bin/qwen "$M"/.bin/cn "$M"/.bin/cline; do
  [ -x "$bin" ] || { echo "setup-agents: error: $bin is missing after npm install (unsupported platform?)" >&2; exit 1; }
  "$bin" --version >/dev/null || { echo "setup-agents: error: $bin --version failed" >&2; exit 1; }
done
echo "$PINS" > "$DIR.partial/.installed"
rm -rf "$DIR" && mv "$DIR.partial" "$DIR"
