#!/usr/bin/env bash
# The store's PostgreSQL tests start a cluster of their own (initdb into a temp dir, a free port on
# 127.0.0.1, fsync off; stopped by PID) with Debian's PostgreSQL server binaries. Installs the
# `postgresql` package when they are missing; part of the README's test command.
set -euo pipefail
bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
if [ -n "${APPLIANCE_PG_BIN:-}" ] || [ -x "$(bin_dir)/initdb" ]; then exit 0; fi
echo "setup-postgres: installing postgresql for the store's PostgreSQL tests" >&2
if [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
else
  echo "setup-postgres: error: PostgreSQL's server binaries are missing; install Debian's postgresql package (apt-get install postgresql) or set APPLIANCE_PG_BIN to a folder holding initdb and pg_ctl" >&2
  exit 1
fi
# Debian's package starts a cluster of its own on port 5432; the tests do not use it.
[ -x "$(bin_dir)/initdb" ] || { echo "setup-postgres: error: initdb did not install under /usr/lib/postgresql/*/bin" >&2; exit 1; }
