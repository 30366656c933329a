#!/usr/bin/env bash
# The store's PostgreSQL tests start a cluster of their own (initdb into a temp dir, a free port on
# 127.0.0.1, fsync off; stopped by PID) with Debian's PostgreSQL server binaries, and the cluster
# tests put an haproxy of their own in front of their nodes (test/helpers/haproxy.ts). Installs
# Debian's `postgresql` and `haproxy` packages when they are missing; part of the README's test
# command.
set -euo pipefail
bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
have_pg() { [ -n "${APPLIANCE_PG_BIN:-}" ] || [ -x "$(bin_dir)/initdb" ]; }
have_haproxy() { [ -n "${APPLIANCE_HAPROXY_BIN:-}" ] || command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ]; }
missing=()
have_pg || missing+=(postgresql)
have_haproxy || missing+=(haproxy)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup-postgres: installing ${missing[*]} for the store's PostgreSQL and cluster tests" >&2
if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root=(sudo)
else
  echo "setup-postgres: error: ${missing[*]} missing; install Debian's packages (apt-get install ${missing[*]}), or set APPLIANCE_PG_BIN to a folder holding initdb and pg_ctl and APPLIANCE_HAPROXY_BIN to an haproxy binary" >&2
  exit 1
fi
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's packages start services of their own (a PostgreSQL cluster on port 5432, an haproxy on
# /etc/haproxy/haproxy.cfg); the tests use neither: each starts its own processes and stops them
# by PID. The haproxy service is stopped and disabled so it holds no port and never restarts.
if [[ " ${missing[*]} " == *" haproxy "* ]]; then
  "${as_root[@]}" service haproxy stop >/dev/null 2>&1 || true
  "${as_root[@]}" systemctl disable haproxy >/dev/null 2>&1 || "${as_root[@]}" update-rc.d haproxy disable >/dev/null 2>&1 || true
fi
have_pg || { echo "setup-postgres: error: initdb did not install under /usr/lib/postgresql/*/bin" >&2; exit 1; }
have_haproxy || { echo "setup-postgres: error: haproxy did not install" >&2; exit 1; }
