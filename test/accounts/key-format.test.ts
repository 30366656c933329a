import { expect, test } from "bun:test";
import { displayKey, generateKey, hashKey, KEY_PREFIX, looksLikeKey } from "../../src/2-services/accounts/key-format";

test("a key is the service prefix plus a secret of at least 192 bits", () => {
  const key = generateKey();
  expect(key.startsWith(KEY_PREFIX)).toBe(true);
  const secret = key.slice(KEY_PREFIX.length);
  expect(secret).toMatch(/^[0-9A-Za-z]+$/);
  expect(secret.length * Math.log2(62)).toBeGreaterThanOrEqual(192);
  expect(looksLikeKey(key)).toBe(true);
});

test("keys do not repeat and use the whole alphabet evenly", () => {
  const keys = Array.from({ length: 2000 }, generateKey);
  expect(new Set(keys).size).toBe(keys.length);
  const counts = new Map<string, number>();
  for (const k of keys) for (const c of k.slice(KEY_PREFIX.length)) counts.set(c, (counts.get(c) ?? 0) + 1);
  expect(counts.size).toBe(62);
  const expected = (2000 * 44) / 62;
  for (const n of counts.values()) expect(Math.abs(n - expected) / expected).toBeLessThan(0.2);
});

test("the stored hash is a SHA-256 digest, not the key", () => {
  const key = generateKey();
  const hash = hashKey(key);
  expect(hash.length).toBe(32);
  expect(Buffer.from(hash).toString("latin1")).not.toContain(key.slice(KEY_PREFIX.length, 20));
  expect(hashKey(key)).toEqual(hash);
});

test("listings show the prefix and last four characters only", () => {
  expect(displayKey("WXYZ")).toBe("sk-apl-…WXYZ");
});

test("malformed keys are recognised without a lookup", () => {
  for (const k of ["", "sk-apl-", "sk-apl-short", `sk-other-${"a".repeat(44)}`, `sk-apl-${"a".repeat(43)}!`]) expect(looksLikeKey(k)).toBe(false);
});
