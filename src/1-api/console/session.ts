import { SESSION_COOKIE, SESSION_MAX_MS, type ConsoleAuth, type ConsoleSession } from "../../2-services/console/auth";
import { DEVICE_COOKIE, DEVICE_MAX_MS } from "../../2-services/console/devices";
import { ApiError } from "../http/errors";

// The console's edge: its cookies, and the checks requests pass (a Host this machine answers to;
// for state-changing requests the same origin and the session's CSRF token in `X-CSRF-Token`).
// Pure functions of the request.

/** A cookie's value; null when absent or not decodable (a bad escape is no cookie, never a 500). */
export function cookieValue(req: Request, name = SESSION_COOKIE): string | null {
  const header = req.headers.get("cookie");
  if (!header) return null;
  for (const part of header.split(";")) {
    const i = part.indexOf("=");
    if (i > 0 && part.slice(0, i).trim() === name) {
      try {
        return decodeURIComponent(part.slice(i + 1).trim());
      } catch {
        return null;
      }
    }
  }
  return null;
}

/** The scheme the browser used: the request's, or a TLS-terminating proxy's X-Forwarded-Proto. */
function schemeOf(req: Request): "http" | "https" {
  const forwarded = req.headers.get("x-forwarded-proto")?.split(",")[0]?.trim().toLowerCase();
  if (forwarded === "https" || forwarded === "http") return forwarded;
  return new URL(req.url).protocol === "https:" ? "https" : "http";
}

function hostOf(req: Request): string {
  return req.headers.get("host") ?? new URL(req.url).host;
}

/** HttpOnly, SameSite=Strict, scoped to /console; Secure when the request came over https. */
export function sessionCookie(req: Request, token: string | null): string {
  const value = token ?? "";
  const age = token ? Math.floor(SESSION_MAX_MS / 1000) : 0;
  return `${SESSION_COOKIE}=${value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age=${age}${schemeOf(req) === "https" ? "; Secure" : ""}`;
}

/** The browser's device token (devices.ts): sent to the sign-in only. */
export function deviceCookie(req: Request, token: string): string {
  const age = Math.floor(DEVICE_MAX_MS / 1000);
  return `${DEVICE_COOKIE}=${token}; Path=/console/api/login; HttpOnly; SameSite=Strict; Max-Age=${age}${schemeOf(req) === "https" ? "; Secure" : ""}`;
}

/** Refuses a Host this machine does not answer to: a DNS-rebinding page's name (hosts.ts). */
export function assertAllowedHost(auth: ConsoleAuth, req: Request): void {
  const host = hostOf(req);
  if (!auth.allowsHost(host))
    throw new ApiError("csrf_failed", `this console does not answer to the host name in "${host.slice(0, 100)}" (add it to server.allowed_hosts)`);
}

const SAFE = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * Refuses a state-changing request sent from another origin: Sec-Fetch-Site other than
 * same-origin, or an Origin whose scheme, host or port is not this request's (RFC 6454 §5: an
 * origin is all three; https://host is another origin than http://host; "null" does not parse).
 * A request with neither header is not from a browser's page.
 */
export function assertSameOrigin(req: Request): void {
  if (SAFE.has(req.method)) return;
  const site = req.headers.get("sec-fetch-site");
  if (site === "cross-site" || site === "same-site") throw new ApiError("csrf_failed", "cross-site request refused");
  const origin = req.headers.get("origin");
  if (origin === null) return;
  let given: string;
  let own: string;
  try {
    given = new URL(origin).origin;
    own = new URL(`${schemeOf(req)}://${hostOf(req)}`).origin;
  } catch {
    throw new ApiError("csrf_failed", "cross-site request refused");
  }
  if (given !== own) throw new ApiError("csrf_failed", "cross-site request refused");
}

/** The signed-in session, with the CSRF check for anything but reads. */
export async function requireSession(auth: ConsoleAuth, req: Request): Promise<ConsoleSession> {
  const session = await auth.session(cookieValue(req));
  if (!session) throw new ApiError("not_signed_in", "not signed in (sign in to the console; API keys are not accepted here)");
  if (!SAFE.has(req.method)) {
    assertSameOrigin(req);
    if (!auth.csrfMatches(session, req.headers.get("x-csrf-token"))) throw new ApiError("csrf_failed", "missing or wrong X-CSRF-Token; reload the console");
  }
  return session;
}

export function requireAdmin(session: ConsoleSession): void {
  if (session.role !== "admin") throw new ApiError("admin_only", "this needs an admin account");
}
