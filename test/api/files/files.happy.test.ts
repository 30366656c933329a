import { afterAll, expect, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { BASE, testApp } from "../../helpers/app";

const t = testApp();
afterAll(() => t.close());
const key = await t.key({ creditUsd: 1 });
const client = new OpenAI({ apiKey: key, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: (u, i) => t.app.handle(new Request(u, i)) });
const JSONL = '{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"hi"}}\n';

test("files.create uploads a JSONL file and returns OpenAI's file object", async () => {
  const f = await client.files.create({ file: await toFile(Buffer.from(JSONL), "input.jsonl"), purpose: "batch" });
  expect(f).toMatchObject({ object: "file", bytes: JSONL.length, filename: "input.jsonl", purpose: "batch", status: "processed", expires_at: null });
  expect(f.id).toMatch(/^file-/);
  expect(typeof f.created_at).toBe("number");
  // Stored under the data dir, by id.
  expect(existsSync(join(t.dir, "files", f.id))).toBe(true);
});

test("retrieve, content, list and delete", async () => {
  const f = await client.files.create({ file: await toFile(Buffer.from(JSONL), "a.jsonl"), purpose: "batch" });
  expect((await client.files.retrieve(f.id)).id).toBe(f.id);
  expect(await (await client.files.content(f.id)).text()).toBe(JSONL);
  const ids: string[] = [];
  for await (const item of client.files.list()) ids.push(item.id);
  expect(ids).toContain(f.id);
  expect(await client.files.delete(f.id)).toEqual({ id: f.id, object: "file", deleted: true });
  expect(existsSync(join(t.dir, "files", f.id))).toBe(false);
  const gone = await client.files.retrieve(f.id).catch((e) => e);
  expect(gone).toBeInstanceOf(OpenAI.NotFoundError);
});

test("the list is newest first and pages with after / has_more", async () => {
  const k = await t.key({ creditUsd: 1 });
  const made: string[] = [];
  for (let i = 0; i < 5; i++) made.push((await t.app.handle(upload(k, `f${i}.jsonl`)).then((r) => r.json())).id);
  const first = await (await t.request("GET", "/v1/files?limit=2", { key: k })).json();
  expect(first.data.map((f: any) => f.id)).toEqual([made[4], made[3]]);
  expect(first.has_more).toBe(true);
  const second = await (await t.request("GET", `/v1/files?limit=2&after=${first.last_id}`, { key: k })).json();
  expect(second.data.map((f: any) => f.id)).toEqual([made[2], made[1]]);
  const asc = await (await t.request("GET", "/v1/files?order=asc", { key: k })).json();
  expect(asc.data.map((f: any) => f.id)).toEqual(made);
});

test("a 3 MB upload streams through intact", async () => {
  const line = JSON.stringify({ custom_id: "x", method: "POST", url: "/v1/embeddings", body: { model: "m", input: "y".repeat(200) } }) + "\n";
  const big = line.repeat(Math.ceil(3_000_000 / line.length));
  const f = await client.files.create({ file: await toFile(Buffer.from(big), "big.jsonl"), purpose: "batch" });
  expect(f.bytes).toBe(big.length);
  expect((await (await client.files.content(f.id)).text()).length).toBe(big.length);
  expect(readdirSync(join(t.dir, "files")).some((n) => n.startsWith("tmp-"))).toBe(false);
});

function upload(key: string, name: string, purpose = "batch", content = JSONL) {
  const fd = new FormData();
  fd.append("purpose", purpose);
  fd.append("file", new Blob([content]), name);
  return new Request(`${BASE}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: fd });
}

test("the sweeper removes result files past their 30 days and leftovers of interrupted uploads", async () => {
  const owner = (await t.deps.accounts.authenticate(key))!;
  const result = await t.deps.files.createResult(owner, "out.jsonl", (sink) => sink.write(Buffer.from("{}\n")));
  expect(result.expires_at! - result.created_at).toBe(30 * 86400);
  Bun.write(join(t.dir, "files", "file-orphan"), "x");
  t.deps.db!.run("UPDATE files SET expires_at = 1 WHERE id = ?", [result.id]);
  expect(await t.deps.files.sweep()).toBe(1);
  expect(existsSync(join(t.dir, "files", result.id))).toBe(false);
  expect(existsSync(join(t.dir, "files", "file-orphan"))).toBe(false);
  expect((await client.files.retrieve(result.id).catch((e) => e)).status).toBe(404);
});


