import { createHash, createHmac, timingSafeEqual } from "node:crypto";

// One hop between two nodes of a cluster (issue 45): a node that does not serve a request's model
// (or a rental's GPU) forwards it, once, to a node that does, with the client's own key and one
// header, `x-appliance-hop`, signed with the cluster's shared secret:
//
//   v1 <from node> <to node> <unix ms> <request id> <sha-256 of the body, or "-"> <HMAC-SHA256>
//   v2 <from node> <to node> <unix ms> <request id> <sha-256 of the body, or "-"> <key id> <HMAC-SHA256>
//
// v2 carries no client key: the request was made by a signed-in console session (issue 48), which
// acts through its account's console key; the serving node takes that key by id (signed, so a
// client cannot name one).
//
// The receiving node checks the signature, that the hop is addressed to it, that it is fresh
// (HOP_MAX_AGE_MS either way: the nodes' clocks are kept by NTP) and that it has not seen it
// before (a hop replayed within its window is refused), then serves the request under the request
// id the hop names — the one it is rate-limited and billed under, once — and never forwards it
// again. A hop with a body hash is checked against the body it carries.

export const HOP_HEADER = "x-appliance-hop";
export const HOP_MAX_AGE_MS = 30_000;

export interface Hop {
  from: string;
  to: string;
  at: number;
  requestId: string;
  /** Hex SHA-256 of the body, or null for a hop whose body is streamed through unread (a rental's notebook). */
  bodyHash: string | null;
  /** v2: the key a console session acted through (the request carries no key of its own). */
  keyId?: string | null;
}

export function bodyHashOf(body: string | Uint8Array): string {
  return createHash("sha256").update(body).digest("hex");
}

/** The header's fields before the signature: v1's, or v2's with the key id. */
function fieldsOf(h: Hop): string[] {
  const base = [h.from, h.to, String(h.at), h.requestId, h.bodyHash ?? "-"];
  return h.keyId ? ["v2", ...base, h.keyId] : ["v1", ...base];
}

function mac(secret: string, h: Hop, method: string, path: string): string {
  return createHmac("sha256", secret)
    .update([...fieldsOf(h), method.toUpperCase(), path].join("\n"))
    .digest("base64url");
}

/** The header's value for a hop of `method path` (the path with its query). */
export function signHop(secret: string, h: Hop, method: string, path: string): string {
  return [...fieldsOf(h), mac(secret, h, method, path)].join(" ");
}

const TOKEN = /^[\w.:-]{1,128}$/;

export type HopCheck = { ok: true; hop: Hop } | { ok: false; reason: string };

/**
 * Checks a hop's header addressed to node `self`. `seen` remembers the hops already taken (by
 * their signature) until they are stale; the node passes its one set when it takes the hop
 * (without it, the check only looks: the listener's per-address cap uses that).
 */
export function verifyHop(value: string, o: { secret: string; self: string; method: string; path: string; now: number; seen?: SeenHops }): HopCheck {
  const parts = value.trim().split(" ");
  const v2 = parts[0] === "v2" && parts.length === 8;
  if (!(v2 || (parts[0] === "v1" && parts.length === 7))) return { ok: false, reason: "the hop header is malformed" };
  const [, from, to, at, requestId, hash] = parts as [string, string, string, string, string, string];
  const keyId = v2 ? parts[6]! : null;
  const sig = parts[parts.length - 1]!;
  if (![from, to, requestId, ...(keyId ? [keyId] : [])].every((t) => TOKEN.test(t)) || !/^\d{1,16}$/.test(at) || !(hash === "-" || /^[0-9a-f]{64}$/.test(hash)))
    return { ok: false, reason: "the hop header is malformed" };
  const hop: Hop = { from, to, at: Number(at), requestId, bodyHash: hash === "-" ? null : hash, ...(keyId ? { keyId } : {}) };
  const want = Buffer.from(mac(o.secret, hop, o.method, o.path));
  const got = Buffer.from(sig);
  if (want.length !== got.length || !timingSafeEqual(want, got)) return { ok: false, reason: "the hop's signature does not match this cluster's secret" };
  if (to !== o.self) return { ok: false, reason: `the hop is addressed to node ${to}, not this one` };
  if (Math.abs(o.now - hop.at) > HOP_MAX_AGE_MS) return { ok: false, reason: "the hop is stale (check that the nodes' clocks agree)" };
  if (o.seen && !o.seen.take(sig, hop.at)) return { ok: false, reason: "the hop was already taken (a replay)" };
  return { ok: true, hop };
}

/** The signatures of the hops a node has taken, kept while they are fresh. */
export class SeenHops {
  private readonly at = new Map<string, number>();
  private limit = 4096;
  /** false: already taken. */
  take(sig: string, at: number): boolean {
    if (this.at.has(sig)) return false;
    if (this.at.size >= this.limit) {
      this.prune(Date.now());
      this.limit = Math.max(4096, this.at.size * 2);
    }
    this.at.set(sig, at);
    return true;
  }
  private prune(now: number): void {
    for (const [k, t] of this.at) if (Math.abs(now - t) > HOP_MAX_AGE_MS) this.at.delete(k);
  }
}
