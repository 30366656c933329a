import { authSuite } from "../http/auth-suite";
import { BASE } from "../../helpers/app";

authSuite({
  name: "files",
  scope: "inference",
  format: "openai",
  routes: [
    { method: "GET", path: "/v1/files" },
    { method: "GET", path: "/v1/files/file-x" },
    { method: "GET", path: "/v1/files/file-x/content" },
    { method: "DELETE", path: "/v1/files/file-x" },
  ],
  owned: async (t, ownerKey) => {
    const fd = new FormData();
    fd.append("purpose", "batch");
    fd.append("file", new Blob(["{}\n"]), "mine.jsonl");
    const res = await t.app.handle(new Request(`${BASE}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${ownerKey}` }, body: fd }));
    const { id } = await res.json();
    return [
      { method: "GET", path: `/v1/files/${id}` },
      { method: "GET", path: `/v1/files/${id}/content` },
      { method: "DELETE", path: `/v1/files/${id}` },
    ];
  },
});

import { afterAll, expect, test } from "bun:test";
import { testApp } from "../../helpers/app";

const t = testApp();
afterAll(() => t.close());

test("another key of the same account cannot see, read or delete the file (spec §5.6)", async () => {
  const owner = await t.key({ account: "team", creditUsd: 1 });
  const sibling = await t.key({ account: "team" });
  const fd = new FormData();
  fd.append("purpose", "batch");
  fd.append("file", new Blob(["{}\n"]), "mine.jsonl");
  const { id } = await (await t.app.handle(new Request(`${BASE}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${owner}` }, body: fd }))).json();
  for (const [method, path] of [["GET", `/v1/files/${id}`], ["GET", `/v1/files/${id}/content`], ["DELETE", `/v1/files/${id}`]] as const)
    expect((await t.request(method, path, { key: sibling })).status).toBe(404);
  expect((await (await t.request("GET", "/v1/files", { key: sibling })).json()).data).toEqual([]);
  expect((await t.request("GET", `/v1/files/${id}`, { key: owner })).status).toBe(200);
});
