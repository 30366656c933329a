import { parseIp } from "./address";

// Requests in flight per client address (server.max_requests_per_address). Bun.serve tells nothing
// about connections, only requests, so this caps what it can see: requests from one address that
// have arrived and not yet been answered, bodies still arriving included. Idle connections and
// slow request heads are Bun's to close (its idle timeout); with every request counted here from
// its head to the end of its answer, one address cannot hold more than the cap of the server's
// file descriptors in requests. An IPv6 client usually holds a whole /64 (privacy addresses
// rotate inside it), so IPv6 addresses are counted by their /64; an IPv4-mapped IPv6 address
// (a dual-stack listener's view of an IPv4 client) counts as its IPv4 address.

/** The key an address is counted under: dotted IPv4, an IPv6 /64 ("2001:db8:1:2::/64"), or the text as given. */
export function addressKey(address: string): string {
  const b = parseIp(address);
  if (!b) return address;
  if (b.length === 4) return b.join(".");
  const mapped = b.subarray(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff;
  if (mapped) return [...b.subarray(12)].join(".");
  const groups: string[] = [];
  for (let i = 0; i < 8; i += 2) groups.push(((b[i]! << 8) | b[i + 1]!).toString(16));
  return `${groups.join(":")}::/64`;
}

export class AddressCap {
  private readonly counts = new Map<string, number>();

  /** `max` requests in flight per key; 0: no cap. */
  constructor(readonly max: number) {}

  /** Counts a request under `key`: a release function (idempotent), or null when the key is at the cap. */
  acquire(key: string): (() => void) | null {
    const n = this.counts.get(key) ?? 0;
    if (this.max > 0 && n >= this.max) return null;
    this.counts.set(key, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = this.counts.get(key)! - 1;
      if (left > 0) this.counts.set(key, left);
      else this.counts.delete(key);
    };
  }

  /** Requests in flight under `key`. */
  inFlight(key: string): number {
    return this.counts.get(key) ?? 0;
  }

  /** Keys with a request in flight (the map holds no others, so it cannot grow with addresses seen once). */
  get keys(): number {
    return this.counts.size;
  }
}
