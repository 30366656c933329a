import { expect, test } from "bun:test";
import { DEVICE_MAX_MS, deviceTokenId, mintDeviceToken } from "../../src/2-services/console/devices";

// Device tokens: bound to one account and its current password hash, valid for a while, unforgeable.

const hash = "$argon2id$v=19$m=65536,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNo";
const now = Date.UTC(2026, 10, 1);

test("a device token names its device for its account and password only, and only while fresh", () => {
  const token = mintDeviceToken("acct_1", hash, now);
  const id = deviceTokenId(token, "acct_1", hash, now + 1000);
  expect(id).toMatch(/^[A-Za-z0-9]{22}$/);
  expect(token.startsWith(`${id}.`)).toBe(true);
  expect(deviceTokenId(token, "acct_2", hash, now)).toBeNull();
  expect(deviceTokenId(token, "acct_1", `${hash}x`, now)).toBeNull(); // the password changed
  expect(deviceTokenId(token, "acct_1", hash, now + DEVICE_MAX_MS)).toBeNull();
  expect(deviceTokenId(token, "acct_1", hash, now - 1)).toBeNull(); // issued in the future
  const [nonce, issued, mac] = token.split(".") as [string, string, string];
  expect(deviceTokenId(`${nonce}.${(now + 1).toString(36)}.${mac}`, "acct_1", hash, now + 5)).toBeNull();
  expect(deviceTokenId(`${"B".repeat(22)}.${issued}.${mac}`, "acct_1", hash, now)).toBeNull();
  for (const bad of [null, "", "x", `${token}.`, `${token}=`, "%", "a".repeat(200)]) expect(deviceTokenId(bad, "acct_1", hash, now)).toBeNull();
});
