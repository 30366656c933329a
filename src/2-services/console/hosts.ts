import { isIPv4, isIPv6 } from "node:net";
import { hostname } from "node:os";
import type { Config } from "../../lib/config";

// DNS rebinding: a page on evil.example whose name is made to resolve to this machine is
// same-origin with itself, so Origin and Sec-Fetch-Site checks pass; only the Host header shows
// the name the browser thinks it is talking to. The console answers only to names that are this
// machine's: IP literals (a literal cannot be rebound), localhost and *.localhost (browsers resolve
// them to loopback themselves, RFC 6761 §6.3), this machine's hostname, *.local (mDNS), the
// configured server.host and rentals.public_host, and server.allowed_hosts ("name", "*.suffix",
// or "*" for any).

/** The configured names the console answers to besides the built-in ones. */
export function consoleHosts(config: Config): string[] {
  return [config.server.host, config.rentals.public_host, ...config.server.allowed_hosts];
}

export type HostAllowList = (host: string) => boolean;

/** A Host header value ("name", "name:port", "[v6]:port") → its name, lower case, or null. */
export function hostName(host: string): string | null {
  let h = host.trim().toLowerCase();
  if (h.startsWith("[")) {
    const end = h.indexOf("]");
    if (end < 0 || !/^(:\d{1,5})?$/.test(h.slice(end + 1))) return null;
    h = h.slice(1, end);
    return isIPv6(h) ? `[${h}]` : null;
  }
  h = h.replace(/:\d{1,5}$/, "");
  if (h.endsWith(".")) h = h.slice(0, -1);
  return /^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$/.test(h) ? h : null;
}

export function hostAllowList(configured: string[], machine: string = hostname()): HostAllowList {
  const exact = new Set<string>();
  const suffixes = [".localhost", ".local"];
  let any = false;
  for (const entry of [machine, ...configured]) {
    const e = entry.trim().toLowerCase();
    if (e === "*") any = true;
    else if (e.startsWith("*.")) suffixes.push(e.slice(1));
    else {
      const name = hostName(e);
      if (name) exact.add(name);
    }
  }
  return (host) => {
    if (any) return true;
    const name = hostName(host);
    if (name === null) return false;
    if (name.startsWith("[") || isIPv4(name) || name === "localhost" || exact.has(name)) return true;
    return suffixes.some((s) => name.endsWith(s) && name.length > s.length);
  };
}
