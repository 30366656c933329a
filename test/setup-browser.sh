#!/usr/bin/env bash
# The web console's browser tests drive Debian's Chromium (playwright-core cannot download a
# browser here). Installs it when missing; part of the README's test command.
set -euo pipefail
CHROMIUM="${APPLIANCE_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then exit 0; fi
echo "setup-browser: installing Debian's chromium for the console's browser tests" >&2
if [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
else
  echo "setup-browser: error: $CHROMIUM is missing; install Debian's chromium package (apt-get install chromium) or set APPLIANCE_CHROMIUM" >&2
  exit 1
fi
[ -x "$CHROMIUM" ] || { echo "setup-browser: error: chromium did not install at $CHROMIUM" >&2; exit 1; }
