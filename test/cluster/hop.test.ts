import { expect, test } from "bun:test";
import { bodyHashOf, HOP_MAX_AGE_MS, SeenHops, signHop, verifyHop, type Hop } from "../../src/2-services/cluster/hop";

// The signed hop between two nodes (issue 45): what the receiving node accepts and what it refuses.

const SECRET = "s".repeat(40);
const NOW = 1_800_000_000_000;
const hop = (o: Partial<Hop> = {}): Hop => ({ from: "node-a", to: "node-b", at: NOW, requestId: "req_abc", bodyHash: bodyHashOf('{"model":"m"}'), ...o });
const check = (value: string, o: Partial<{ secret: string; self: string; method: string; path: string; now: number; seen: SeenHops }> = {}) =>
  verifyHop(value, { secret: SECRET, self: "node-b", method: "POST", path: "/v1/chat/completions?x=1", now: NOW, seen: new SeenHops(), ...o });

test("a hop signed with the cluster's secret, addressed to this node and fresh, is taken with its request id and body hash", () => {
  const r = check(signHop(SECRET, hop(), "POST", "/v1/chat/completions?x=1"));
  expect(r).toEqual({ ok: true, hop: hop() });
});

test("a hop is refused when its signature, addressee, age, path, method or body hash does not match, or when it comes twice", () => {
  const good = signHop(SECRET, hop(), "POST", "/v1/chat/completions?x=1");
  const reasons = [
    check(signHop("t".repeat(40), hop(), "POST", "/v1/chat/completions?x=1")),
    check(good, { self: "node-c" }),
    check(good, { now: NOW + HOP_MAX_AGE_MS + 1 }),
    check(good, { now: NOW - HOP_MAX_AGE_MS - 1 }),
    check(good, { path: "/v1/embeddings" }),
    check(good, { method: "GET" }),
    check(good.replace(bodyHashOf('{"model":"m"}'), bodyHashOf('{"model":"n"}'))),
    check(good.replace("req_abc", "req_xyz")),
    check("v1 node-a node-b"),
    check(""),
  ].map((r) => (r.ok ? "accepted" : r.reason));
  expect(reasons).toEqual([
    "the hop's signature does not match this cluster's secret",
    "the hop is addressed to node node-b, not this one",
    "the hop is stale (check that the nodes' clocks agree)",
    "the hop is stale (check that the nodes' clocks agree)",
    "the hop's signature does not match this cluster's secret",
    "the hop's signature does not match this cluster's secret",
    "the hop's signature does not match this cluster's secret",
    "the hop's signature does not match this cluster's secret",
    "the hop header is malformed",
    "the hop header is malformed",
  ]);
  const seen = new SeenHops();
  expect(check(good, { seen }).ok).toBe(true);
  expect(check(good, { seen })).toEqual({ ok: false, reason: "the hop was already taken (a replay)" });
  // Looking without taking (the listener's per-address cap) does not use the hop up.
  expect(verifyHop(good, { secret: SECRET, self: "node-b", method: "POST", path: "/v1/chat/completions?x=1", now: NOW }).ok).toBe(true);
});

test("a hop streamed through unread (a rental's notebook) carries no body hash", () => {
  const value = signHop(SECRET, hop({ bodyHash: null }), "GET", "/rentals/r1/api");
  expect(value.split(" ")[5]).toBe("-");
  expect(check(value, { method: "GET", path: "/rentals/r1/api" })).toEqual({ ok: true, hop: hop({ bodyHash: null }) });
});

test("a hop for a console session (v2) carries the key it acts through, signed: another key id, or the key dropped, breaks the signature", () => {
  const withKey = hop({ keyId: "key_console1" });
  const good = signHop(SECRET, withKey, "POST", "/v1/chat/completions?x=1");
  expect(good.startsWith("v2 ")).toBe(true);
  expect(check(good)).toEqual({ ok: true, hop: withKey });
  const reasons = [
    check(good.replace("key_console1", "key_other")),
    // The key taken out and the version set back: a v1 hop whose signature was made over v2's fields.
    check(good.replace("v2 ", "v1 ").replace(" key_console1", "")),
    check(good.replace("key_console1", "key console1")),
  ].map((r) => (r.ok ? "accepted" : r.reason));
  expect(reasons).toEqual([
    "the hop's signature does not match this cluster's secret",
    "the hop's signature does not match this cluster's secret",
    "the hop header is malformed",
  ]);
});
