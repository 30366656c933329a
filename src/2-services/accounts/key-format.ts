import { timingSafeEqual } from "node:crypto";
import { randomBase62 } from "../../lib/ids";

// A key is the fixed service prefix plus 44 base62 characters (≈ 262 bits of secret).
// Only SHA-256(key) is stored: the secret is random, so a slow password hash adds nothing.
export const KEY_PREFIX = "sk-apl-";
const SECRET_LENGTH = 44;
const KEY_PATTERN = /^sk-apl-[0-9A-Za-z]{44}$/;

export function generateKey(): string {
  return KEY_PREFIX + randomBase62(SECRET_LENGTH);
}

export function hashKey(key: string): Uint8Array {
  return Bun.SHA256.hash(key) as Uint8Array;
}

/** The same digest as text, for in-memory lookups. */
export function hashKeyBase64(key: string): string {
  return Bun.SHA256.hash(key, "base64");
}

export function looksLikeKey(key: string): boolean {
  return KEY_PATTERN.test(key);
}

export function sameHash(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** What listings show: the prefix and the last four characters, never more. */
export function displayKey(last4: string): string {
  return `${KEY_PREFIX}…${last4}`;
}
