// Is an IP address one the server must not reach on a client's behalf? Every textual form of an
// address is parsed to its bytes first, so that one written oddly — IPv4 as `2130706433`,
// `0177.0.0.1` or `127.1`; IPv6 zero-expanded, upper-case, or with the IPv4 part in hex
// (`::ffff:7f00:1`, which is how WHATWG URL parsing writes `[::ffff:127.0.0.1]`) — gets the same
// answer as its plain form. IPv6 addresses that carry an IPv4 address (mapped, compatible, NAT64,
// 6to4) are judged by the IPv4 address they lead to. Anything unparseable counts as internal.

export interface AddressVerdict {
  internal: boolean;
  /** The address in plain form: dotted IPv4, or compressed lower-case IPv6. */
  address: string;
  /** The IPv4 address an IPv6 one leads to, when it embeds one. */
  via?: string;
  /** Why it is internal: the IANA special-purpose block it lies in. */
  block?: string;
}

/** IPv4 ranges that are not globally reachable (IANA IPv4 special-purpose registry, RFC 6890). */
const V4_BLOCKS = blocks([
  ["0.0.0.0", 8, "this network"], // 0.0.0.0 reaches the host itself on Linux
  ["10.0.0.0", 8, "private"],
  ["100.64.0.0", 10, "shared address space (CGNAT)"],
  ["127.0.0.0", 8, "loopback"],
  ["169.254.0.0", 16, "link-local"],
  ["172.16.0.0", 12, "private"],
  ["192.0.0.0", 24, "IETF protocol assignments"],
  ["192.0.2.0", 24, "documentation"],
  ["192.88.99.0", 24, "6to4 relay anycast"],
  ["192.168.0.0", 16, "private"],
  ["198.18.0.0", 15, "benchmarking"],
  ["198.51.100.0", 24, "documentation"],
  ["203.0.113.0", 24, "documentation"],
  ["224.0.0.0", 4, "multicast"],
  ["240.0.0.0", 4, "reserved"], // 255.255.255.255 included
]);

/** IPv6 ranges inside global unicast (2000::/3) that are not globally reachable. Outside 2000::/3
 * only the IPv4-carrying forms below can be public; everything else there (loopback, unspecified,
 * unique-local, link-local, site-local, multicast, discard, SIIT) is internal. */
const V6_BLOCKS = blocks([
  ["2001::", 23, "IETF protocol assignments (Teredo among them)"],
  ["2001:db8::", 32, "documentation"],
  ["3fff::", 20, "documentation"],
  ["5f00::", 16, "segment routing"],
]);
const NAT64 = parseIp("64:ff9b::")!;
const NAT64_LOCAL = parseIp("64:ff9b:1::")!;
const TEREDO = parseIp("2001::")!;

function blocks(list: [string, number, string][]) {
  return list.map(([net, bits, name]) => ({ net: parseIp(net)!, bits, name }));
}

/** Judges an IP address given in any textual form. */
export function classifyAddress(text: string): AddressVerdict {
  const bytes = parseIp(text);
  if (!bytes) return { internal: true, address: text, block: "not an IP address" };
  if (bytes.length === 4) return classifyV4(bytes);
  const address = formatV6(bytes);
  const v4 = embeddedV4(bytes);
  if (v4) {
    const inner = classifyV4(v4.bytes);
    if (v4.always) return { internal: true, address, via: inner.address, block: v4.always };
    return { internal: inner.internal, address, via: inner.address, ...(inner.block ? { block: inner.block } : {}) };
  }
  if ((bytes[0]! & 0xe0) !== 0x20) return { internal: true, address, block: v6Outside(bytes) };
  const block = V6_BLOCKS.find((k) => inPrefix(bytes, k.net, k.bits));
  return block ? { internal: true, address, block: block.name } : { internal: false, address };
}

export const isInternalAddress = (text: string) => classifyAddress(text).internal;

function classifyV4(b: Uint8Array): AddressVerdict {
  const address = b.join(".");
  const block = V4_BLOCKS.find((k) => inPrefix(b, k.net, k.bits));
  return block ? { internal: true, address, block: block.name } : { internal: false, address };
}

/** The IPv4 address an IPv6 address leads to: `always` names forms refused whatever they carry. */
function embeddedV4(b: Uint8Array): { bytes: Uint8Array; always?: string } | null {
  const zeros = (from: number, to: number) => b.subarray(from, to).every((x) => x === 0);
  // ::ffff:a.b.c.d, IPv4-mapped (RFC 4291 2.5.5.2): a socket sends to a.b.c.d
  if (zeros(0, 10) && b[10] === 0xff && b[11] === 0xff) return { bytes: b.subarray(12) };
  // ::a.b.c.d, IPv4-compatible (deprecated, RFC 4291 2.5.5.1); :: and ::1 are not this form
  if (zeros(0, 12) && !zeros(12, 15)) return { bytes: b.subarray(12) };
  // 64:ff9b::/96, the NAT64 well-known prefix (RFC 6052): a translator sends to a.b.c.d
  if (inPrefix(b, NAT64, 96)) return { bytes: b.subarray(12) };
  // 64:ff9b:1::/48, NAT64 for local use (RFC 8215); the address sits in bits 48-63 and 72-87
  if (inPrefix(b, NAT64_LOCAL, 48)) return { bytes: Uint8Array.of(b[6]!, b[7]!, b[9]!, b[10]!), always: "NAT64 local-use prefix" };
  // 2002::/16, 6to4 (RFC 3056): a relay sends to a.b.c.d
  if (b[0] === 0x20 && b[1] === 0x02) return { bytes: b.subarray(2, 6) };
  // 2001::/32, Teredo (RFC 4380): the client's address, inverted, in the last 32 bits
  if (inPrefix(b, TEREDO, 32)) return { bytes: b.subarray(12).map((x) => x ^ 0xff), always: "Teredo" };
  return null;
}

function v6Outside(b: Uint8Array): string {
  if (b.every((x, i) => x === (i === 15 ? 1 : 0))) return "loopback";
  if (b.every((x) => x === 0)) return "unspecified";
  if ((b[0]! & 0xfe) === 0xfc) return "unique-local";
  if (b[0] === 0xfe && (b[1]! & 0xc0) === 0x80) return "link-local";
  if (b[0] === 0xfe && (b[1]! & 0xc0) === 0xc0) return "site-local";
  if (b[0] === 0xff) return "multicast";
  return "not global unicast";
}

function inPrefix(b: Uint8Array, net: Uint8Array, bits: number): boolean {
  if (b.length !== net.length) return false;
  for (let i = 0; i < bits; i += 8) {
    const mask = bits - i >= 8 ? 0xff : (0xff << (8 - (bits - i))) & 0xff;
    if ((b[i / 8]! & mask) !== (net[i / 8]! & mask)) return false;
  }
  return true;
}

/** An IP address's bytes (4 or 16), or null. IPv4 in every form inet_aton takes; IPv6 in every
 * RFC 4291 form, with brackets and a zone index tolerated. */
export function parseIp(text: string): Uint8Array | null {
  let s = text.trim().toLowerCase();
  if (s.startsWith("[") && s.endsWith("]")) s = s.slice(1, -1);
  if (s.includes(":")) return parseV6(s.replace(/%.*$/, ""));
  return parseV4(s.replace(/\.$/, ""));
}

/** inet_aton's forms: 1 to 4 parts, each decimal, octal (leading 0) or hex (0x); the last part
 * fills the remaining bytes (`127.1`, `2130706433`). */
function parseV4(s: string): Uint8Array | null {
  const parts = s.split(".");
  if (parts.length < 1 || parts.length > 4) return null;
  const nums: number[] = [];
  for (const p of parts) {
    let n: number;
    if (/^0x[0-9a-f]*$/.test(p)) n = p.length === 2 ? 0 : parseInt(p.slice(2), 16);
    else if (/^0[0-7]*$/.test(p)) n = parseInt(p, 8);
    else if (/^[1-9][0-9]*$/.test(p)) n = Number(p);
    else return null;
    if (!Number.isSafeInteger(n)) return null;
    nums.push(n);
  }
  const last = nums.pop()!;
  if (nums.some((n) => n > 255) || last >= 256 ** (4 - nums.length)) return null;
  const value = nums.reduce((acc, n, i) => acc + n * 256 ** (3 - i), 0) + last;
  return Uint8Array.of(value >>> 24, (value >>> 16) & 0xff, (value >>> 8) & 0xff, value & 0xff);
}

function parseV6(s: string): Uint8Array | null {
  let tail: Uint8Array | null = null;
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (dotted) {
    // only plain dotted-decimal is allowed in an IPv6 address (RFC 4291 2.2)
    if (!dotted[2]!.split(".").every((p) => /^(0|[1-9]\d{0,2})$/.test(p) && Number(p) < 256)) return null;
    tail = parseV4(dotted[2]!);
    s = dotted[1]!.endsWith("::") ? dotted[1]! : dotted[1]!.slice(0, -1);
  }
  const groupsWanted = tail ? 6 : 8;
  const halves = s.split("::");
  if (halves.length > 2) return null;
  const split = (h: string) => (h === "" ? [] : h.split(":"));
  const head = split(halves[0]!);
  const rest = halves.length === 2 ? split(halves[1]!) : [];
  if (![...head, ...rest].every((g) => /^[0-9a-f]{1,4}$/.test(g))) return null;
  const missing = groupsWanted - head.length - rest.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return null;
  const groups = [...head, ...Array(halves.length === 2 ? missing : 0).fill("0"), ...rest].map((g) => parseInt(g, 16));
  const out = new Uint8Array(16);
  groups.forEach((g, i) => {
    out[i * 2] = g >> 8;
    out[i * 2 + 1] = g & 0xff;
  });
  if (tail) out.set(tail, 12);
  return out;
}

/** RFC 5952 text: lower case, the longest run of two or more zero groups as `::`. */
function formatV6(b: Uint8Array): string {
  const g = Array.from({ length: 8 }, (_, i) => (b[i * 2]! << 8) | b[i * 2 + 1]!);
  let best = -1, bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = g.map((x) => x.toString(16));
  if (best < 0) return hex.join(":");
  return `${hex.slice(0, best).join(":")}::${hex.slice(best + bestLen).join(":")}`;
}
