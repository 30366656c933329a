import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Scope } from "../../../src/2-services/accounts/types";
import { testApp, type TestApp } from "../../helpers/app";

// The one auth suite every route group runs (STYLE "Tests"): no key, wrong key, revoked key,
// another account's key, missing scope — each answered in the group's own wire format.

export interface RouteCase {
  method: string;
  path: string;
  body?: unknown;
}

export interface AuthGroup {
  name: string;
  routes: RouteCase[];
  scope: Scope;
  format: "openai" | "anthropic";
  /**
   * For groups whose resources belong to a key: creates one with `ownerKey` and returns the
   * path(s) another key must not see (answered 404 as if it did not exist).
   */
  owned?: (t: TestApp, ownerKey: string) => Promise<RouteCase[]>;
}

export function expectAuthError(res: Response, body: any, format: "openai" | "anthropic", status: number, code: string) {
  expect(res.status).toBe(status);
  expect(res.headers.get("x-request-id")).toMatch(/^req_/);
  if (format === "anthropic") {
    expect(body.type).toBe("error");
    expect(typeof body.error.type).toBe("string");
    expect(typeof body.error.message).toBe("string");
  } else {
    expect(body.error.code).toBe(code);
    expect(typeof body.error.message).toBe("string");
  }
  return format === "anthropic" ? body.error.message : body.error.message;
}

export function authSuite(group: AuthGroup) {
  describe(`auth: ${group.name}`, () => {
    let t: TestApp;
    beforeAll(() => {
      t = testApp();
    });
    afterAll(() => t.close());

    const otherScopes: Scope[] = group.scope === "rental" ? ["inference"] : ["rental"];

    for (const r of group.routes) {
      const label = `${r.method} ${r.path}`;
      const send = (headers: Record<string, string>) => t.request(r.method, r.path, { body: r.body, headers });

      test(`${label} without a key is 401 Invalid API key`, async () => {
        const res = await send({});
        expect(expectAuthError(res, await res.json(), group.format, 401, "invalid_api_key")).toBe("Invalid API key");
      });

      test(`${label} with a wrong key is 401`, async () => {
        const wrong = "sk-apl-" + "A".repeat(44);
        for (const auth of [`Bearer ${wrong}`, "Bearer not-a-key", "Basic dXNlcjpwYXNz", "Bearer"]) {
          const res = await send({ authorization: auth });
          expect(expectAuthError(res, await res.json(), group.format, 401, "invalid_api_key")).toBe("Invalid API key");
        }
      });

      test(`${label} with a revoked key is 401`, async () => {
        const key = await t.key({ scopes: [group.scope] });
        await t.deps.accounts.revokeKey(key);
        const res = await send({ authorization: `Bearer ${key}` });
        expect(expectAuthError(res, await res.json(), group.format, 401, "invalid_api_key")).toBe("Invalid API key");
      });

      test(`${label} with a key lacking the ${group.scope} scope is 403`, async () => {
        const key = await t.key({ scopes: otherScopes });
        const res = await send({ authorization: `Bearer ${key}` });
        const msg = expectAuthError(res, await res.json(), group.format, 403, "missing_scope");
        expect(msg).toContain(group.scope);
      });

      test(`${label} accepts a valid key of any account and any User-Agent`, async () => {
        for (const ua of ["curl/8.0", "OpenAI/Python 1.0", "claude-cli/2.0 (external, cli)"]) {
          const key = await t.key({ scopes: [group.scope], creditUsd: 1 });
          const res = await send({ authorization: `Bearer ${key}`, "user-agent": ua });
          expect(res.status).not.toBe(401);
          expect(res.status).not.toBe(403);
        }
      });
    }

    if (group.owned) {
      test("another account's key gets 404 for this key's resources", async () => {
        const owner = await t.key({ scopes: [group.scope], creditUsd: 1 });
        const stranger = await t.key({ scopes: [group.scope], creditUsd: 1 });
        for (const r of await group.owned!(t, owner)) {
          const res = await t.request(r.method, r.path, { key: stranger, body: r.body });
          expect(res.status).toBe(404);
        }
      });
    }
  });
}
