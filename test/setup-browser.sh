#!/usr/bin/env bash
# The web console's browser tests drive Debian's Chromium (playwright-core cannot download a
# browser here); the HTTPS one makes Chromium trust a test CA through an NSS database, written with
# certutil (libnss3-tools). Installs what is missing; part of the README's test command.
set -euo pipefail
CHROMIUM="${APPLIANCE_CHROMIUM:-/usr/bin/chromium}"
packages=()
[ -x "$CHROMIUM" ] || packages+=(chromium)
command -v certutil >/dev/null || packages+=(libnss3-tools)
if [ ${#packages[@]} = 0 ]; then exit 0; fi
echo "setup-browser: installing ${packages[*]} for the console's browser tests" >&2
if [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
else
  echo "setup-browser: error: missing ${packages[*]}; install Debian's chromium and libnss3-tools packages (apt-get install chromium libnss3-tools) or set APPLIANCE_CHROMIUM" >&2
  exit 1
fi
[ -x "$CHROMIUM" ] || { echo "setup-browser: error: chromium did not install at $CHROMIUM" >&2; exit 1; }
command -v certutil >/dev/null || { echo "setup-browser: error: certutil did not install (libnss3-tools)" >&2; exit 1; }
