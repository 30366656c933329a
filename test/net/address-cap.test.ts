import { expect, test } from "bun:test";
import { AddressCap, addressKey } from "../../src/lib/net/address-cap";

// The per-address cap on requests in flight (server.max_requests_per_address): what an address is
// counted under, and the count itself.

const keys: { name: string; input: string; expected: string }[] = [
  { name: "IPv4 as it is", input: "203.0.113.7", expected: "203.0.113.7" },
  { name: "IPv4 loopback is counted like any address", input: "127.0.0.1", expected: "127.0.0.1" },
  { name: "IPv4-mapped IPv6 (a dual-stack listener's IPv4 client) as its IPv4 address", input: "::ffff:203.0.113.7", expected: "203.0.113.7" },
  { name: "IPv4-mapped IPv6 in hex", input: "::ffff:cb00:7107", expected: "203.0.113.7" },
  { name: "IPv6 by its /64", input: "2001:db8:1:2:aaaa:bbbb:cccc:dddd", expected: "2001:db8:1:2::/64" },
  { name: "another address in the same /64", input: "2001:db8:1:2::1", expected: "2001:db8:1:2::/64" },
  { name: "IPv6 written upper-case and zero-padded", input: "2001:0DB8:0001:0002:0000:0000:0000:0001", expected: "2001:db8:1:2::/64" },
  { name: "IPv6 loopback", input: "::1", expected: "0:0:0:0::/64" },
  { name: "not an address (a request served without a socket)", input: "local", expected: "local" },
];

test.each(keys)("$name", ({ input, expected }) => {
  expect(addressKey(input)).toBe(expected);
});

test("different /64s are different keys", () => {
  expect(addressKey("2001:db8:1:2::1")).not.toBe(addressKey("2001:db8:1:3::1"));
});

test("an address gets up to the cap, is refused beyond it, and gets a place back when one is released", () => {
  const cap = new AddressCap(3);
  const held = [cap.acquire("a"), cap.acquire("a"), cap.acquire("a")];
  expect(held.every((r) => typeof r === "function")).toBe(true);
  expect(cap.acquire("a")).toBeNull();
  // another address is not affected
  const other = cap.acquire("b");
  expect(other).not.toBeNull();
  held[0]!();
  expect(cap.inFlight("a")).toBe(2);
  const again = cap.acquire("a");
  expect(again).not.toBeNull();
  expect(cap.acquire("a")).toBeNull();
});

test("releasing twice frees one place only", () => {
  const cap = new AddressCap(2);
  const r1 = cap.acquire("a")!;
  cap.acquire("a");
  r1();
  r1();
  expect(cap.inFlight("a")).toBe(1);
  expect(cap.acquire("a")).not.toBeNull();
  expect(cap.acquire("a")).toBeNull();
});

test("an address with nothing in flight is forgotten (the map does not grow with every address seen)", () => {
  const cap = new AddressCap(2);
  for (let i = 0; i < 1000; i++) cap.acquire(`10.0.${i >> 8}.${i & 255}`)!();
  expect(cap.keys).toBe(0);
});

test("a cap of 0 is no cap", () => {
  const cap = new AddressCap(0);
  for (let i = 0; i < 10_000; i++) expect(cap.acquire("a")).not.toBeNull();
  expect(cap.inFlight("a")).toBe(10_000);
});
