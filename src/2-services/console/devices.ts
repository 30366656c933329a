import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import { randomBase62 } from "../../lib/ids";

// Device tokens (OWASP's "device cookies"): a browser that signed in to an account gets a token
// bound to that account, and its later sign-ins to it are throttled on their own budget instead of
// waiting out the account's back-off that an attacker elsewhere keeps running (throttle.ts).
// Nothing is stored: the token is MACed with a key derived from the account's password hash, a
// server-side secret that changes with the password — so a new password (the CLI reset) also ends
// every device's standing.

export const DEVICE_COOKIE = "appliance_device";
export const DEVICE_MAX_MS = 180 * 86_400_000;

function mac(accountId: string, passwordHash: string, body: string): Buffer {
  const key = createHash("sha256").update("appliance console device v1\0").update(passwordHash).digest();
  return createHmac("sha256", key).update(`${accountId}.${body}`).digest();
}

/** A new device token for the account: "<id>.<issued, base 36>.<mac, base64url>". */
export function mintDeviceToken(accountId: string, passwordHash: string, now: number): string {
  const body = `${randomBase62(22)}.${now.toString(36)}`;
  return `${body}.${mac(accountId, passwordHash, body).toString("base64url")}`;
}

/** The token's id when it is this account's and still valid, else null. */
export function deviceTokenId(token: string | null, accountId: string, passwordHash: string, now: number): string | null {
  if (!token || token.length > 128) return null;
  const m = /^([A-Za-z0-9]{22})\.([0-9a-z]{1,12})\.([A-Za-z0-9_-]{43})$/.exec(token);
  if (!m) return null;
  const issued = parseInt(m[2]!, 36);
  if (!(issued <= now && now - issued < DEVICE_MAX_MS)) return null;
  const given = Buffer.from(m[3]!, "base64url");
  const want = mac(accountId, passwordHash, `${m[1]}.${m[2]}`);
  return given.length === want.length && timingSafeEqual(given, want) ? m[1]! : null;
}
