import type { FdLimit } from "../../lib/net/rlimit";
import { ok, warn, type Check } from "./check";

// The limit on open file descriptors. Every client connection holds one, and at the limit the
// listener accepts nothing and answers nothing (issue 41: ~20k slow connections took a 20,000-fd
// server down). The server raises its soft limit to the hard one at start (src/lib/net/rlimit.ts), so
// the hard limit is what it gets. Doctor runs from a shell: a service runs under its unit's
// LimitNOFILE instead, which install.sh's unit sets.

/** Below this many descriptors, a few hundred slow clients fill the server (max_requests_per_address is 256 by default). */
export const FD_WARN_BELOW = 8192;

const RAISE =
  "raise the hard limit: under systemd, LimitNOFILE=65536 in the unit's [Service] (install.sh's unit has it; `systemctl edit appliance` adds it to another); " +
  "from a shell, `ulimit -n 65536` before `appliance serve` (as root, or after raising `nofile` in /etc/security/limits.conf)";

const show = (n: number) => (n === Infinity ? "unlimited" : String(n));

export function checkFdLimit(limit: FdLimit | null): Check {
  const name = "open files";
  if (!limit) return ok(name, "the descriptor limit could not be read here (/proc/self/limits); the server logs it at start");
  const detail = `soft limit ${show(limit.soft)}, hard ${show(limit.hard)}: the server raises its soft limit to ${show(limit.hard)} at start (one descriptor per connection)`;
  if (limit.hard < FD_WARN_BELOW) return warn(name, `${detail}, fewer than ${FD_WARN_BELOW}`, RAISE);
  return ok(name, detail);
}
