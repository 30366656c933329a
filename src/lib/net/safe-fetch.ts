import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { type AddressVerdict, classifyAddress, parseIp } from "./address";

// Fetching a URL a client named without letting it steer the server at its own network (SSRF).
// Every hop, redirects included, is resolved ONCE, every address is judged (address.ts), and the
// connection goes to an address that was judged: the URL's host is replaced by the IP literal and
// the name travels in the Host header and as the TLS server name (SNI and certificate check), so
// no second DNS answer can swap in another address (DNS rebinding). Nothing connects before the
// judgement, so a refused address gives the same answer whatever listens on it.

/** Answers a host name with its addresses, in the order to try them. */
export type Resolver = (hostname: string) => Promise<string[]>;

export const systemResolver: Resolver = async (hostname) => (await lookup(hostname, { all: true, verbatim: true })).map((a) => a.address);

export type RefusalKind = "scheme" | "credentials" | "unresolved" | "internal" | "redirects" | "unreachable" | "timeout";

/** Why a URL was not fetched; `detail` is safe to show the client. */
export class FetchRefused extends Error {
  constructor(
    readonly kind: RefusalKind,
    readonly detail: string,
  ) {
    super(detail);
    this.name = "FetchRefused";
  }
}

export interface SafeFetchOptions {
  /** Schemes accepted, with the colon: ["https:"]. Checked on every hop. */
  protocols: string[];
  /** Let loopback, private, link-local and other internal addresses through. */
  allowPrivate: boolean;
  maxRedirects: number;
  signal: AbortSignal;
  headers?: Record<string, string>;
  resolve?: Resolver;
  /** The judge of addresses (classifyAddress); a test may let one loopback address count as public. */
  classify?: (address: string) => AddressVerdict;
}

/** GETs `url`, following redirects by hand; the response is the final one, 2xx or not. */
export async function safeFetch(start: URL, o: SafeFetchOptions): Promise<Response> {
  let url = start;
  for (let hop = 0; ; hop++) {
    const addresses = await resolveTarget(url, o);
    const res = await fetchAt(url, addresses, o);
    const location = res.status >= 300 && res.status < 400 ? res.headers.get("location") : null;
    if (location === null) return res;
    await res.body?.cancel().catch(() => {});
    if (hop >= o.maxRedirects) throw new FetchRefused("redirects", `redirected more than ${o.maxRedirects} times`);
    try {
      url = new URL(location, url);
    } catch {
      throw new FetchRefused("redirects", "redirected to an invalid URL");
    }
  }
}

/** The addresses `url` may be fetched from: its scheme and host checked, its name resolved once. */
export async function resolveTarget(url: URL, o: Pick<SafeFetchOptions, "protocols" | "allowPrivate" | "resolve" | "classify"> & { signal?: AbortSignal }): Promise<string[]> {
  if (!o.protocols.includes(url.protocol)) throw new FetchRefused("scheme", `got ${url.protocol}//`);
  if (url.username || url.password) throw new FetchRefused("credentials", "must not carry credentials");
  const host = url.hostname.replace(/^\[|\]$/g, "");
  let addresses: string[];
  if (isIP(host)) addresses = [host];
  else {
    try {
      addresses = await untilAborted((o.resolve ?? systemResolver)(host), o.signal);
    } catch {
      if (o.signal?.aborted) throw new FetchRefused("timeout", "timed out");
      addresses = [];
    }
    if (addresses.length === 0) throw new FetchRefused("unresolved", `names a host that does not resolve (${host})`);
  }
  return addresses.map((a) => {
    if (!parseIp(a)) throw new FetchRefused("unresolved", `names a host that does not resolve to an IP address (${host})`);
    const v = (o.classify ?? classifyAddress)(a);
    if (v.internal && !o.allowPrivate) {
      const shown = v.via ? `${v.address}, which leads to ${v.via}` : v.address;
      throw new FetchRefused("internal", `points at an internal address (${shown}: ${v.block})`);
    }
    return v.address;
  });
}

/** One request to `url` over a connection to one of `addresses`, tried in order; no redirects. */
async function fetchAt(url: URL, addresses: string[], o: SafeFetchOptions): Promise<Response> {
  let last: unknown;
  for (const address of addresses) {
    try {
      return await fetch(pinned(url, address), {
        redirect: "manual",
        signal: o.signal,
        // a fresh connection each time: a pooled one was opened, and its certificate checked, for
        // whichever name used it first
        keepalive: false,
        headers: { ...o.headers, host: url.host },
        ...(url.protocol === "https:" && !isIP(url.hostname.replace(/^\[|\]$/g, "")) ? { tls: { serverName: url.hostname } } : {}),
      });
    } catch (e) {
      if (o.signal.aborted) throw new FetchRefused("timeout", "timed out");
      last = e;
    }
  }
  throw new FetchRefused("unreachable", (last as Error).message);
}

/** `p`, or a rejection once `signal` aborts (a DNS lookup cannot be cancelled, only left behind). */
function untilAborted<T>(p: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener("abort", abort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", abort));
  });
}

/** `url` with its host replaced by `address` (plain form, from resolveTarget). */
function pinned(url: URL, address: string): URL {
  const u = new URL(url);
  u.hostname = address.includes(":") ? `[${address}]` : address;
  return u;
}
