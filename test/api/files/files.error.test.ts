import { afterAll, expect, test } from "bun:test";
import { BASE, testApp } from "../../helpers/app";

const t = testApp();
afterAll(() => t.close());
const key = await t.key({ creditUsd: 1 });

function post(body: BodyInit, headers: Record<string, string> = {}) {
  return t.app.handle(new Request(`${BASE}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${key}`, ...headers }, body }));
}

function form(fields: Record<string, string | [string, string]>) {
  const fd = new FormData();
  for (const [k, v] of Object.entries(fields)) {
    if (Array.isArray(v)) fd.append(k, new Blob([v[1]]), v[0]);
    else fd.append(k, v);
  }
  return fd;
}

test.each([
  { name: "a purpose other than batch", body: () => form({ purpose: "fine-tune", file: ["a.jsonl", "{}\n"] }), param: "purpose" },
  { name: "no purpose", body: () => form({ file: ["a.jsonl", "{}\n"] }), param: "purpose" },
  { name: "no file", body: () => form({ purpose: "batch" }), param: "file" },
  { name: "a JSON body instead of multipart", body: () => JSON.stringify({ purpose: "batch" }), param: "file", headers: { "content-type": "application/json" } },
])("$name is a 400 naming $param", async ({ body, param, headers }) => {
  const res = await post(body(), headers);
  expect(res.status).toBe(400);
  expect((await res.json()).error.param).toBe(param);
});

test("a file over 50 MB is refused with 413 and nothing is kept", async () => {
  const res = await post(form({ purpose: "batch", file: ["big.jsonl", "x".repeat(50 * 1024 * 1024 + 1)] }));
  expect(res.status).toBe(413);
  expect((await res.json()).error.param).toBe("file");
  const list = await (await t.request("GET", "/v1/files", { key })).json();
  expect(list.data).toEqual([]);
});

test("an unknown file id is 404 in the OpenAI envelope", async () => {
  for (const path of ["/v1/files/file-nope", "/v1/files/file-nope/content"]) {
    const res = await t.request("GET", path, { key });
    expect(res.status).toBe(404);
    expect((await res.json()).error.message).toBe("No such File object: file-nope");
  }
  expect((await t.request("DELETE", "/v1/files/file-nope", { key })).status).toBe(404);
});
