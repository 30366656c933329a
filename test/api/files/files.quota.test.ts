import { afterAll, describe, expect, test } from "bun:test";
import { readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { BASE, tempDir, testApp, type TestApp } from "../../helpers/app";
import { fileLines, uploadLines, waitForBatch } from "../../helpers/batches";
import { chatTestApp } from "../../helpers/chat";
import { serveCli } from "../../helpers/cli";

// Issue 41 M4: /v1/files had no storage bound (20 × 50 MB in 1.7 s, all 200). Each account's live
// files are held to [files] quota_mb (413 storage_quota_exceeded), uploads must leave
// [files] min_free_disk_mb free on the data dir's filesystem (507 insufficient_storage), and the
// batch results the server writes are never refused by either.

const MIB = 1024 * 1024;

function sdk(t: TestApp, key: string, opts: { maxRetries?: number; seen?: Request[] } = {}) {
  return new OpenAI({
    apiKey: key,
    baseURL: `${BASE}/v1`,
    maxRetries: opts.maxRetries ?? 0,
    fetch: (url, init) => {
      const req = new Request(url, init);
      if (req.method === "POST" && req.url.endsWith("/v1/files")) opts.seen?.push(req); // not the SDK's own `data:,` probe
      return t.app.handle(req);
    },
  });
}

const upload = (client: OpenAI, bytes: number, name = "f.jsonl") => client.files.create({ file: new File([Buffer.alloc(bytes, 0x61)], name), purpose: "batch" });

/** The status and OpenAI error body of an SDK call that failed. */
async function refusal(p: Promise<unknown>) {
  try {
    await p;
  } catch (e) {
    if (e instanceof OpenAI.APIError) return { status: e.status, error: e.error as { message: string; type: string; code: string; param: string | null }, headers: e.headers };
    throw e;
  }
  throw new Error("the call succeeded");
}

/** What is on disk under the files folder: published files and temporary leftovers. */
const onDisk = (t: TestApp) => readdirSync(join(t.dir, "files"));

/** A multipart body as a stream with no length (chunked): only the checks while and after it streams see it. */
function chunkedUpload(t: TestApp, key: string, bytes: number, chunk = 64 * 1024) {
  const boundary = "quota-test-boundary";
  const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="c.jsonl"\r\n\r\n`);
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  let sent = 0;
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(head);
    },
    async pull(c) {
      await Bun.sleep(0);
      if (sent >= bytes) {
        c.enqueue(tail);
        return c.close();
      }
      const n = Math.min(chunk, bytes - sent);
      sent += n;
      c.enqueue(Buffer.alloc(n, 0x62));
    },
  });
  return t.app.handle(
    new Request(`${BASE}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": `multipart/form-data; boundary=${boundary}` }, body, duplex: "half" } as RequestInit),
  );
}

describe("the account's storage quota", async () => {
  const t = testApp({ config: { files: { quota_mb: 1, min_free_disk_mb: 0 } } });
  afterAll(() => t.close());
  const key = await t.key({ account: "filler", creditUsd: 1 });
  const client = sdk(t, key);

  test("an upload that would pass it is refused with 413 storage_quota_exceeded; one ending exactly at it is kept", async () => {
    const a = await upload(client, 600_000);
    const b = await upload(client, MIB - 600_000); // exactly the room left
    expect([a.bytes, b.bytes]).toEqual([600_000, MIB - 600_000]);
    const r = await refusal(upload(client, 1));
    expect(r.status).toBe(413);
    expect(r.error).toMatchObject({ type: "invalid_request_error", code: "storage_quota_exceeded", param: "file" });
    expect(r.error.message).toContain(`${MIB} of ${MIB} bytes`);
    expect((await client.files.list()).data.map((f) => f.id).sort()).toEqual([a.id, b.id].sort());
    expect(onDisk(t).sort()).toEqual([a.id, b.id].sort()); // the refused upload left nothing
    const account = t.deps.db!.query<{ id: string }, []>("SELECT id FROM accounts WHERE name = 'filler'").get()!.id;
    expect(await t.deps.files.usedBytes(account)).toBe(MIB);
  });

  test("deleting a file frees its bytes", async () => {
    const [first] = (await client.files.list()).data.filter((f) => f.bytes === 600_000);
    await client.files.delete(first!.id);
    expect((await upload(client, 600_000)).bytes).toBe(600_000);
    expect((await refusal(upload(client, 1))).status).toBe(413);
  });

  test("the quota is the account's: its other keys share it, another account is unaffected", async () => {
    const sameAccount = sdk(t, await t.key({ account: "filler" }));
    expect((await refusal(upload(sameAccount, 10))).error.code).toBe("storage_quota_exceeded");
    const other = sdk(t, await t.key({ account: "neighbour", creditUsd: 1 }));
    expect((await upload(other, MIB)).bytes).toBe(MIB);
  });

  test("a Content-Length past the room left is refused before the body is read", async () => {
    const roomy = await t.key({ account: "announcer", creditUsd: 1 });
    let pulled = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(c) {
        await Bun.sleep(1);
        pulled += 64 * 1024;
        c.enqueue(Buffer.alloc(64 * 1024, 0x63)); // never ends: reading it would not finish
      },
    });
    const res = await t.app.handle(
      new Request(`${BASE}/v1/files`, {
        method: "POST",
        headers: { authorization: `Bearer ${roomy}`, "content-type": "multipart/form-data; boundary=x", "content-length": String(5 * MIB) },
        body,
        duplex: "half",
      } as RequestInit),
    );
    expect(res.status).toBe(413);
    expect((await res.json()).error.code).toBe("storage_quota_exceeded");
    expect(pulled).toBeLessThan(MIB); // refused from the header, not after a quota's worth of body
  }, 10_000);

  test("a chunked upload (no length) past the quota is cut while it streams, and what was written is removed", async () => {
    const chunker = await t.key({ account: "chunker", creditUsd: 1 });
    const before = onDisk(t);
    const res = await chunkedUpload(t, chunker, 3 * MIB);
    expect(res.status).toBe(413);
    const body = await res.json();
    expect(body.error.code).toBe("storage_quota_exceeded");
    expect(body.error.message).toContain("passed it at");
    expect(onDisk(t).sort()).toEqual(before.sort());
    // The exact boundary holds without a length too.
    const ok = await chunkedUpload(t, chunker, MIB);
    expect(ok.status).toBe(200);
    expect((await ok.json()).bytes).toBe(MIB);
  });

  test("uploads arriving at once cannot pass the quota together", async () => {
    const pair = await t.key({ account: "pair", creditUsd: 1 });
    const statuses = await Promise.all([chunkedUpload(t, pair, 700_000, 16 * 1024), chunkedUpload(t, pair, 700_000, 16 * 1024)].map((p) => p.then((r) => r.status)));
    expect(statuses.sort()).toEqual([200, 413]);
  });
});

describe("the free-space floor", () => {
  const t = testApp({ config: { files: { quota_mb: 0, min_free_disk_mb: 1024 * 1024 * 1024 } } }); // 1 PiB: more than this disk has
  afterAll(() => t.close());

  test("an upload that would leave less free space than the floor is refused with 507, not retried, nothing kept", async () => {
    const seen: Request[] = [];
    const client = sdk(t, await t.key({ creditUsd: 1 }), { maxRetries: 2, seen });
    const r = await refusal(upload(client, 1000));
    expect(r.status).toBe(507);
    expect(r.error).toMatchObject({ type: "server_error", code: "insufficient_storage" });
    expect(r.error.message).toContain("low on disk space");
    expect(seen).toHaveLength(1); // x-should-retry: false — a retry finds the same disk
    expect(onDisk(t)).toEqual([]);
  });

  test("a chunked upload is refused too", async () => {
    const res = await chunkedUpload(t, await t.key({ creditUsd: 1 }), 1000);
    expect(res.status).toBe(507);
    expect(onDisk(t)).toEqual([]);
  });
});

test("batch results are written for an account at its quota, and under the floor", async () => {
  const t = await chatTestApp({ config: { files: { quota_mb: 1, min_free_disk_mb: 0 } } });
  try {
    const client = t.openai(await t.key({ account: "full", creditUsd: 5 }));
    const lines = Array.from({ length: 3 }, (_, i) => ({
      custom_id: `r${i}`,
      url: "/v1/chat/completions",
      body: { model: "chat", max_tokens: 400, temperature: 0, chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: `line ${i}` }] },
    }));
    const input = await uploadLines(client, lines);
    const inputBytes = (await client.files.retrieve(input)).bytes;
    await client.files.create({ file: await toFile(Buffer.alloc(MIB - inputBytes, 0x61), "fill.jsonl"), purpose: "batch" }); // exactly full
    expect((await refusal(upload(client, 1))).status).toBe(413);
    t.deps.config.files.min_free_disk_mb = 1024 * 1024 * 1024; // and the disk "full" too
    const batch = await client.batches.create({ input_file_id: input, endpoint: "/v1/chat/completions", completion_window: "24h" });
    t.deps.batchWorker.start();
    const done = await waitForBatch(client, batch.id);
    expect(done.status).toBe("completed");
    expect(done.request_counts).toEqual({ total: 3, completed: 3, failed: 0 });
    const out = await fileLines(client, done.output_file_id);
    expect(out.map((l) => l.custom_id)).toEqual(["r0", "r1", "r2"]);
    // The results count: the account is now past its quota, and stays refused until it deletes files.
    const result = await client.files.retrieve(done.output_file_id!);
    expect(result.bytes).toBeGreaterThan(0);
    t.deps.config.files.min_free_disk_mb = 0;
    const r = await refusal(upload(client, 1));
    expect(r.status).toBe(413);
    expect(r.error.message).toContain(`${MIB + result.bytes} of ${MIB} bytes`);
  } finally {
    await t.close();
  }
}, 60_000);

test("through the real server: 20 uploads of 1 MiB against a 4 MiB quota, 4 kept and the rest refused (413)", async () => {
  const dir = tempDir();
  const config = join(dir, "config.toml");
  writeFileSync(config, `[files]\nquota_mb = 4\nmin_free_disk_mb = 0\n`);
  const { child, url, key } = await serveCli(dir, ["--port", "0"], { APPLIANCE_CONFIG: config });
  try {
    const client = new OpenAI({ apiKey: key!, baseURL: `${url}/v1`, maxRetries: 0 });
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => client.files.create({ file: new File([Buffer.alloc(MIB, 0x61 + (i % 26))], `f${i}.jsonl`), purpose: "batch" })),
    );
    const kept = results.filter((r) => r.status === "fulfilled");
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    expect(kept).toHaveLength(4);
    for (const r of refused) expect([(r.reason as InstanceType<typeof OpenAI.APIError>).status, (r.reason as any).error?.code]).toEqual([413, "storage_quota_exceeded"]);
    expect(readdirSync(join(dir, "files")).filter((n) => !n.startsWith("tmp-"))).toHaveLength(4);
    expect(readdirSync(join(dir, "files")).filter((n) => n.startsWith("tmp-"))).toEqual([]);
  } finally {
    child.kill("SIGTERM");
    await child.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);
