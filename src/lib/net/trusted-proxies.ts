import { parseIp } from "./address";

// Who sent a request when a reverse proxy stands in front (server.trusted_proxies, issue 41 L4).
// The socket's peer is the client unless it is a listed proxy; then the client is the right-most
// address of X-Forwarded-For that is not a listed proxy. Each proxy appends the address it was
// connected from, so walking from the right over listed proxies reaches the first address that no
// trusted hop vouches beyond; everything left of it was written by the client and may be anything
// (the left-most entry above all: the client sends it). Never read from an unlisted peer.
//   peer 10.0.0.5 (listed), X-Forwarded-For "1.2.3.4, 203.0.113.7"         → 203.0.113.7
//   peer 10.0.0.5 (listed), X-Forwarded-For "203.0.113.7, 10.0.0.4" (listed) → 203.0.113.7
//   peer 198.51.100.9 (not listed), any X-Forwarded-For                    → 198.51.100.9
// Every entry listed: the left-most. An entry that is no address (a proxy's "unknown"): the hop to
// its right, the last one vouched for. No X-Forwarded-For: the peer.

interface Block {
  net: Uint8Array;
  bits: number;
}

export interface TrustedProxies {
  readonly blocks: readonly Block[];
}

export const NO_TRUSTED_PROXIES: TrustedProxies = { blocks: [] };

/** IPv4-mapped IPv6 (a dual-stack listener's view of an IPv4 peer) as its 4 bytes. */
function bytesOf(address: string): Uint8Array | null {
  const b = parseIp(address);
  if (b && b.length === 16 && b.subarray(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff) return b.slice(12);
  return b;
}

/** "10.0.0.0/8", "fd00::/8", "127.0.0.1" (one address) → its block, or a problem in words. */
function parseBlock(entry: string): Block | string {
  const [address, bitsText, ...more] = entry.trim().split("/");
  const net = more.length ? null : bytesOf(address!);
  if (!net || !/^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$|:/.test(address!.trim())) return `"${entry}" is not an IP address or CIDR block (e.g. "10.0.0.0/8", "::1")`;
  const max = net.length * 8;
  const bits = bitsText === undefined ? max : /^\d{1,3}$/.test(bitsText) ? Number(bitsText) : NaN;
  if (!(bits >= 0 && bits <= max)) return `"${entry}": the prefix length must be 0 to ${max}`;
  return { net, bits };
}

/** The problem with one server.trusted_proxies entry, or null (config validation). */
export function trustedProxyProblem(entry: string): string | null {
  const b = parseBlock(entry);
  return typeof b === "string" ? b : null;
}

/** The configured list, checked by config validation (a bad entry here throws). */
export function parseTrustedProxies(entries: readonly string[]): TrustedProxies {
  return {
    blocks: entries.map((e) => {
      const b = parseBlock(e);
      if (typeof b === "string") throw new Error(`server.trusted_proxies: ${b}`);
      return b;
    }),
  };
}

function inBlock(b: Uint8Array, { net, bits }: Block): boolean {
  if (b.length !== net.length) return false;
  for (let i = 0; i < bits; i += 8) {
    const mask = bits - i >= 8 ? 0xff : (0xff << (8 - (bits - i))) & 0xff;
    if ((b[i / 8]! & mask) !== (net[i / 8]! & mask)) return false;
  }
  return true;
}

export function isTrustedProxy(proxies: TrustedProxies, address: string): boolean {
  if (proxies.blocks.length === 0) return false;
  const b = bytesOf(address);
  return b !== null && proxies.blocks.some((block) => inBlock(b, block));
}

/** One X-Forwarded-For entry as an address: brackets and a port taken off ("[::1]:443", "1.2.3.4:80"); null when it is none. */
function entryAddress(entry: string): string | null {
  let s = entry.trim().replace(/^"|"$/g, "");
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(s);
  if (bracketed) s = bracketed[1]!;
  else if (/^[\d.]+:\d+$/.test(s)) s = s.slice(0, s.lastIndexOf(":"));
  return bytesOf(s) && (s.includes(":") || /^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(s)) ? s : null;
}

/** The client of a request whose socket peer is `peer` (see the top of this file). */
export function forwardedClient(peer: string, forwardedFor: string | null, proxies: TrustedProxies): string {
  if (!forwardedFor || !isTrustedProxy(proxies, peer)) return peer;
  let vouched = peer;
  const entries = forwardedFor.split(",");
  for (let i = entries.length - 1; i >= 0; i--) {
    if (entries[i]!.trim() === "") continue;
    const address = entryAddress(entries[i]!);
    if (address === null) return vouched;
    if (!isTrustedProxy(proxies, address)) return address;
    vouched = address;
  }
  return vouched;
}
