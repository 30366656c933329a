import { timingSafeEqual } from "node:crypto";

// How a rental's notebook server is reached (issue 27). `proxy` (the default): it listens on the
// machine's loopback and the owner reaches it through the appliance's own port at
// `/rentals/{rental_id}/` (src/1-api/rentals/proxy.ts), HTTP and WebSocket, with Jupyter's `base_url`
// set to that path so its links resolve there; nothing else needs opening on the firewall and TLS
// on the main port covers it. `direct`: the server listens on `rentals.process.bind` (or a port the
// Docker daemon publishes on every address) and the owner connects to that port.

export type RentalAccess = "proxy" | "direct";

/** The path a proxied rental is served under; also its Jupyter `base_url`. */
export const basePathOf = (rentalId: string): string => `/rentals/${rentalId}/`;

/**
 * Jupyter Server flags for a server behind the proxy: it serves under `basePath`, and accepts the
 * Host the browser sent to the appliance (forwarded as is, so Jupyter's own Origin check on
 * WebSockets compares like with like) although it listens on loopback only.
 */
export function proxyFlags(basePath: string | undefined): string[] {
  return basePath ? [`--ServerApp.base_url=${basePath}`, "--ServerApp.allow_remote_access=True"] : [];
}

/**
 * The appliance's public base URL as rental owners reach it: https when the main port serves TLS
 * (`server.tls`), the rentals' public host, the main port. Read defensively: `server.tls` may be
 * absent from the schema.
 */
export function publicBaseOf(server: { port: number; tls?: unknown }, publicHost: string): string {
  const tls = (server as { tls?: { cert?: unknown } | null }).tls;
  const https = !!tls && typeof tls === "object" && !!(tls as { cert?: unknown }).cert;
  const host = publicHost.includes(":") && !publicHost.startsWith("[") ? `[${publicHost}]` : publicHost;
  const port = (https && server.port === 443) || (!https && server.port === 80) ? "" : `:${server.port}`;
  return `${https ? "https" : "http"}://${host}${port}`;
}

/** Constant-time equality of two secrets (their SHA-256 digests, so the lengths never leak). */
export function sameSecret(given: string, expected: string): boolean {
  const digest = (s: string) => new Bun.CryptoHasher("sha256").update(s).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

/**
 * The value of the proxy's access cookie for a rental: derived from its token, so the cookie is no
 * copy of the token, and useless for any other rental.
 */
export function accessCookieValue(rentalId: string, token: string): string {
  return new Bun.CryptoHasher("sha256").update(`appliance-rental-access\0${rentalId}\0${token}`).digest("hex");
}
