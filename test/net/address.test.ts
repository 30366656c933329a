import { describe, expect, test } from "bun:test";
import { classifyAddress, parseIp } from "../../src/lib/net/address";

// The SSRF address table: every way of writing an address the server must not reach, and the
// public addresses it must still reach. `via` is the IPv4 address an IPv6 one leads to.

const internal: { name: string; input: string; address: string; via?: string; block: string }[] = [
  { name: "IPv4 loopback", input: "127.0.0.1", address: "127.0.0.1", block: "loopback" },
  { name: "IPv4 loopback, elsewhere in 127/8", input: "127.255.0.9", address: "127.255.0.9", block: "loopback" },
  { name: "IPv4 loopback as one decimal number", input: "2130706433", address: "127.0.0.1", block: "loopback" },
  { name: "IPv4 loopback in octal", input: "0177.0.0.1", address: "127.0.0.1", block: "loopback" },
  { name: "IPv4 loopback short", input: "127.1", address: "127.0.0.1", block: "loopback" },
  { name: "IPv4 loopback in hex parts", input: "0x7f.0x0.0x0.0x1", address: "127.0.0.1", block: "loopback" },
  { name: "IPv4 loopback as one hex number", input: "0x7f000001", address: "127.0.0.1", block: "loopback" },
  { name: "IPv4 with a trailing dot", input: "127.0.0.1.", address: "127.0.0.1", block: "loopback" },
  { name: "this network", input: "0.0.0.0", address: "0.0.0.0", block: "this network" },
  { name: "this network as 0", input: "0", address: "0.0.0.0", block: "this network" },
  { name: "private 10/8", input: "10.1.2.3", address: "10.1.2.3", block: "private" },
  { name: "private 172.16/12", input: "172.31.255.1", address: "172.31.255.1", block: "private" },
  { name: "private 192.168/16", input: "192.168.1.1", address: "192.168.1.1", block: "private" },
  { name: "cloud metadata (link-local)", input: "169.254.169.254", address: "169.254.169.254", block: "link-local" },
  { name: "CGNAT", input: "100.64.0.1", address: "100.64.0.1", block: "shared address space (CGNAT)" },
  { name: "benchmarking", input: "198.18.0.1", address: "198.18.0.1", block: "benchmarking" },
  { name: "documentation", input: "203.0.113.5", address: "203.0.113.5", block: "documentation" },
  { name: "multicast", input: "224.0.0.1", address: "224.0.0.1", block: "multicast" },
  { name: "broadcast", input: "255.255.255.255", address: "255.255.255.255", block: "reserved" },
  { name: "IPv6 loopback", input: "::1", address: "::1", block: "loopback" },
  { name: "IPv6 loopback zero-expanded", input: "0:0:0:0:0:0:0:1", address: "::1", block: "loopback" },
  { name: "IPv6 loopback with leading zeros", input: "0000:0000:0000:0000:0000:0000:0000:0001", address: "::1", block: "loopback" },
  { name: "IPv6 unspecified", input: "::", address: "::", block: "unspecified" },
  { name: "IPv6 unique-local", input: "fd00::1", address: "fd00::1", block: "unique-local" },
  { name: "IPv6 link-local with a zone", input: "fe80::1%eth0", address: "fe80::1", block: "link-local" },
  { name: "IPv6 site-local", input: "fec0::1", address: "fec0::1", block: "site-local" },
  { name: "IPv6 multicast", input: "ff02::1", address: "ff02::1", block: "multicast" },
  { name: "IPv6 documentation", input: "2001:db8::1", address: "2001:db8::1", block: "documentation" },
  { name: "IPv4-translated (SIIT)", input: "::ffff:0:7f00:1", address: "::ffff:0:7f00:1", block: "not global unicast" },
  { name: "mapped loopback, dotted", input: "::ffff:127.0.0.1", address: "::ffff:7f00:1", via: "127.0.0.1", block: "loopback" },
  { name: "mapped loopback, hex (as URL parsing writes it)", input: "::ffff:7f00:1", address: "::ffff:7f00:1", via: "127.0.0.1", block: "loopback" },
  { name: "mapped loopback, bracketed", input: "[::ffff:7f00:1]", address: "::ffff:7f00:1", via: "127.0.0.1", block: "loopback" },
  { name: "mapped loopback, zero-expanded", input: "0:0:0:0:0:ffff:127.0.0.1", address: "::ffff:7f00:1", via: "127.0.0.1", block: "loopback" },
  { name: "mapped loopback, upper case and leading zeros", input: "0000::FFFF:7F00:0001", address: "::ffff:7f00:1", via: "127.0.0.1", block: "loopback" },
  { name: "mapped cloud metadata, dotted", input: "::ffff:169.254.169.254", address: "::ffff:a9fe:a9fe", via: "169.254.169.254", block: "link-local" },
  { name: "mapped cloud metadata, hex", input: "::ffff:a9fe:a9fe", address: "::ffff:a9fe:a9fe", via: "169.254.169.254", block: "link-local" },
  { name: "mapped private", input: "::ffff:10.0.0.1", address: "::ffff:a00:1", via: "10.0.0.1", block: "private" },
  { name: "IPv4-compatible loopback, dotted", input: "::127.0.0.1", address: "::7f00:1", via: "127.0.0.1", block: "loopback" },
  { name: "IPv4-compatible loopback, hex", input: "::7f00:1", address: "::7f00:1", via: "127.0.0.1", block: "loopback" },
  { name: "NAT64 well-known prefix to loopback", input: "64:ff9b::127.0.0.1", address: "64:ff9b::7f00:1", via: "127.0.0.1", block: "loopback" },
  { name: "NAT64 well-known prefix to cloud metadata", input: "64:ff9b::a9fe:a9fe", address: "64:ff9b::a9fe:a9fe", via: "169.254.169.254", block: "link-local" },
  { name: "NAT64 local-use prefix, whatever it carries", input: "64:ff9b:1:808:8:800::", address: "64:ff9b:1:808:8:800::", via: "8.8.8.8", block: "NAT64 local-use prefix" },
  { name: "6to4 to loopback", input: "2002:7f00:1::", address: "2002:7f00:1::", via: "127.0.0.1", block: "loopback" },
  { name: "6to4 to private", input: "2002:c0a8:101::1", address: "2002:c0a8:101::1", via: "192.168.1.1", block: "private" },
  { name: "Teredo (client 127.0.0.1)", input: "2001:0:4136:e378:8000:63bf:80ff:fffe", address: "2001:0:4136:e378:8000:63bf:80ff:fffe", via: "127.0.0.1", block: "Teredo" },
  { name: "Teredo with a public client", input: "2001:0:4136:e378:8000:63bf:f7f7:f7f7", address: "2001:0:4136:e378:8000:63bf:f7f7:f7f7", via: "8.8.8.8", block: "Teredo" },
];

const unparseable = ["localhost", "256.1.1.1", "1.2.3.4.5", "1::2::3", "::1.2.3.04", "12345::", "", "0x1g.0.0.1", "::ffff:0177.0.0.1"];

const publicOnes: { name: string; input: string; address: string; via?: string }[] = [
  { name: "IPv4", input: "8.8.8.8", address: "8.8.8.8" },
  { name: "IPv4 just past 172.16/12", input: "172.32.0.1", address: "172.32.0.1" },
  { name: "IPv4 just below CGNAT", input: "100.63.255.255", address: "100.63.255.255" },
  { name: "IPv6", input: "2606:4700:4700::1111", address: "2606:4700:4700::1111" },
  { name: "IPv6 zero-expanded", input: "2001:4860:4860:0:0:0:0:8888", address: "2001:4860:4860::8888" },
  { name: "mapped public IPv4", input: "::ffff:8.8.8.8", address: "::ffff:808:808", via: "8.8.8.8" },
  { name: "NAT64 well-known prefix to a public IPv4 (DNS64 networks)", input: "64:ff9b::8.8.8.8", address: "64:ff9b::808:808", via: "8.8.8.8" },
  { name: "6to4 to a public IPv4", input: "2002:808:808::1", address: "2002:808:808::1", via: "8.8.8.8" },
];

describe("internal addresses, in every form", () => {
  for (const c of internal)
    test(`${c.name} (${c.input}) is internal: ${c.block}`, () => {
      expect(classifyAddress(c.input)).toEqual({ internal: true, address: c.address, ...(c.via ? { via: c.via } : {}), block: c.block });
    });

  test("what is not an IP address counts as internal", () => {
    for (const s of unparseable) expect([s, parseIp(s), classifyAddress(s).internal]).toEqual([s, null, true]);
  });
});

describe("public addresses", () => {
  for (const c of publicOnes)
    test(`${c.name} (${c.input}) is public`, () => {
      expect(classifyAddress(c.input)).toEqual({ internal: false, address: c.address, ...(c.via ? { via: c.via } : {}) });
    });
});

test("every odd form WHATWG URL parsing leaves in a host is judged like its plain form", () => {
  // URL parsing already turns odd IPv4 into dotted form and writes IPv6 in hex; the judge must
  // agree with it on what each host is
  for (const host of ["2130706433", "0177.0.0.1", "127.1", "0x7f.1", "[::ffff:127.0.0.1]", "[0:0:0:0:0:ffff:127.0.0.1]", "[::127.0.0.1]", "[64:ff9b::127.0.0.1]"]) {
    const parsed = new URL(`http://${host}/`).hostname;
    expect([host, classifyAddress(parsed).internal, classifyAddress(host).internal]).toEqual([host, true, true]);
    expect(parseIp(parsed)).toEqual(parseIp(host));
  }
});
