import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { openDatabase } from "../../src/4-store/db";
import { sqliteFileStore, type FileStore, type NewFile } from "../../src/4-store/files";
import { connectPostgres, migratePostgres } from "../../src/4-store/pg/db";
import { CHUNK, postgresFileStore } from "../../src/4-store/pg/files";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// Issue 44: the file store (src/4-store/files.ts) on a real SQLite file with the bytes on disk, and
// on PostgreSQL with the bytes in the database in 1 MiB chunks, one suite: bytes round-trip (a
// multi-chunk file too) and are visible only once published; a failed write leaves nothing; the
// quota is checked with the row; a removed or expired file takes its bytes with it; bytes no file
// names are swept once their writer is long gone; pages and usage.

interface Backend {
  store: FileStore;
  /** Where the bytes of `id` are, as the backend keeps them: files on disk, or chunk rows. */
  pieces(id: string): Promise<number>;
  /** Bytes of `id` as a writer that died two days ago left them (no row names them). */
  orphan(id: string): Promise<void>;
  run(sql: string, ...params: unknown[]): Promise<void>;
  close(): Promise<void>;
}

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const DAY = 86_400_000;

async function sqliteBackend(): Promise<Backend> {
  const dir = tempDir("appliance-files-");
  dirs.push(dir);
  const db = openDatabase(join(dir, "store.sqlite"), { synchronous: "normal" });
  const filesDir = join(dir, "files");
  return {
    store: sqliteFileStore(db, filesDir),
    // a file being written is tmp-<random> until it is closed, then <id>
    pieces: async (id) => readdirSync(filesDir).filter((n) => n === id || n.startsWith("tmp-")).length,
    orphan: async (id) => writeFileSync(join(filesDir, id), "left behind"),
    run: async (sql, ...p) => void db.query(sql).run(...(p as never[])),
    close: async () => db.close(),
  };
}

async function postgresBackend(): Promise<Backend> {
  const pools = connectPostgres(await freshDatabase("files"));
  await migratePostgres(pools.money);
  const numbered = (sql: string) => {
    let i = 0;
    return sql.replace(/\?/g, () => `$${++i}`);
  };
  return {
    store: postgresFileStore(pools.money, pools.fast),
    pieces: async (id) => Number((await pools.money`SELECT COUNT(*) AS n FROM file_chunks WHERE file_id = ${id}`)[0].n),
    orphan: async (id) => void (await pools.money`INSERT INTO file_chunks (file_id, seq, data, created_at) VALUES (${id}, 0, ${Buffer.from("left behind")}, ${Date.now() - 2 * DAY})`),
    run: async (sql, ...p) => void (await pools.money.unsafe(numbered(sql), p)),
    close: () => pools.close(),
  };
}

async function owner(b: Backend, tag: string) {
  await b.run("INSERT INTO accounts (id, name, created_at) VALUES (?, ?, 1)", `acct_${tag}`, tag);
  await b.run("INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES (?, ?, 'premium', ?, 'abcd', 1)", `key_${tag}`, `acct_${tag}`, new Uint8Array(Buffer.from(`secret ${tag}`)));
  return { key_id: `key_${tag}`, account_id: `acct_${tag}` };
}

const rowOf = (id: string, who: { key_id: string; account_id: string }, bytes: number, over: Partial<NewFile> = {}): NewFile => ({
  id,
  ...who,
  filename: "f.jsonl",
  purpose: "batch",
  bytes,
  status: "processed",
  created_at: Date.now(),
  expires_at: null,
  ...over,
});

/** Deterministic bytes that are not all alike: a misplaced chunk shows. */
function pattern(n: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = 12345;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

async function readAll(body: Blob | ReadableStream<Uint8Array> | null): Promise<Uint8Array> {
  if (body === null) throw new Error("no such file");
  return new Uint8Array(await new Response(body).arrayBuffer());
}

/** Writes `data` in uneven pieces (as a multipart body arrives) and closes the sink. */
async function written(store: FileStore, data: Uint8Array) {
  const sink = await store.create();
  for (let at = 0, step = 1; at < data.length; at += step, step = (step * 7 + 13) % 300_000 || 1) await sink.write(data.subarray(at, Math.min(data.length, at + step)));
  expect(await sink.close()).toBe(data.length);
  return sink;
}

for (const [name, make] of [["SQLite", sqliteBackend], ["PostgreSQL", postgresBackend]] as const) {
  describe(`file store on ${name}`, () => {
    test("bytes round-trip, a file of several chunks too, and are visible only once published", async () => {
      const b = await make();
      try {
        const who = await owner(b, "rt");
        const data = pattern(2 * CHUNK + 12_345);
        const sink = await written(b.store, data);
        expect(await b.store.byId(sink.id)).toBeNull();
        expect(await b.store.contents(sink.id)).toBeNull();
        expect(await b.store.publish(rowOf(sink.id, who, data.length))).toEqual({ ok: true });
        expect((await b.store.byId(sink.id))!).toMatchObject({ id: sink.id, bytes: data.length, deleted_at: null });
        const back = await readAll(await b.store.contents(sink.id));
        expect(back.length).toBe(data.length);
        expect(Buffer.compare(Buffer.from(back), Buffer.from(data))).toBe(0);
        expect(await b.pieces(sink.id)).toBe(name === "PostgreSQL" ? 3 : 1);
        // an empty file is a file too
        const empty = await written(b.store, new Uint8Array(0));
        await b.store.publish(rowOf(empty.id, who, 0));
        expect((await readAll(await b.store.contents(empty.id))).length).toBe(0);
      } finally {
        await b.close();
      }
    });

    test("a failed write leaves nothing: no row, no bytes", async () => {
      const b = await make();
      try {
        const who = await owner(b, "fail");
        const cut = await b.store.create();
        await cut.write(pattern(CHUNK + 10)); // a chunk is in the store already
        expect(await b.pieces(cut.id)).toBeGreaterThan(0);
        await cut.discard(); // the upload failed half-way
        expect(await b.pieces(cut.id)).toBe(0);
        const closed = await written(b.store, pattern(1000));
        await closed.discard(); // refused after it was whole
        expect(await b.pieces(closed.id)).toBe(0);
        expect(await b.store.byId(closed.id)).toBeNull();
        expect(await b.store.page(who.key_id, { limit: 10 })).toEqual([]);
      } finally {
        await b.close();
      }
    });

    test("the quota is checked with the row: two files published at once cannot pass it together", async () => {
      const b = await make();
      try {
        const who = await owner(b, "quota");
        const [x, y] = [await written(b.store, pattern(600)), await written(b.store, pattern(600))];
        const out = await Promise.all([b.store.publish(rowOf(x.id, who, 600), 1000), b.store.publish(rowOf(y.id, who, 600), 1000)]);
        expect(out.filter((o) => o.ok)).toHaveLength(1);
        expect(out.find((o) => !o.ok)).toEqual({ ok: false, used: 600 });
        expect(await b.store.usedBytes(who.account_id, Date.now())).toBe(600);
        // exactly at the quota is kept
        const z = await written(b.store, pattern(400));
        expect(await b.store.publish(rowOf(z.id, who, 400), 1000)).toEqual({ ok: true });
      } finally {
        await b.close();
      }
    });

    test("a removed file takes its bytes with it; removing it again is false", async () => {
      const b = await make();
      try {
        const who = await owner(b, "rm");
        const sink = await written(b.store, pattern(CHUNK + 1));
        await b.store.publish(rowOf(sink.id, who, CHUNK + 1));
        expect(await b.store.remove(sink.id, 5)).toBe(true);
        expect(await b.store.remove(sink.id, 6)).toBe(false);
        expect(await b.store.byId(sink.id)).toBeNull();
        expect(await b.store.contents(sink.id)).toBeNull();
        expect(await b.pieces(sink.id)).toBe(0);
        expect(await b.store.usedBytes(who.account_id, Date.now())).toBe(0);
      } finally {
        await b.close();
      }
    });

    test("the sweep expires files past their time with their bytes, drops bytes a dead writer left, and spares a file being published", async () => {
      const b = await make();
      try {
        const who = await owner(b, "sweep");
        const now = Date.now();
        const old = await written(b.store, pattern(100));
        await b.store.publish(rowOf(old.id, who, 100, { expires_at: now - 1 }));
        const kept = await written(b.store, pattern(100));
        await b.store.publish(rowOf(kept.id, who, 100, { expires_at: now + DAY }));
        const staged = await written(b.store, pattern(100)); // closed, its row not written yet
        await b.orphan("file-orphan");
        expect(await b.store.usedBytes(who.account_id, now)).toBe(100); // an expired file no longer counts, swept or not
        expect(await b.store.sweep(now)).toBe(1);
        expect(await b.store.byId(old.id)).toBeNull();
        expect(await b.pieces(old.id)).toBe(0);
        expect(await b.pieces("file-orphan")).toBe(0);
        expect((await readAll(await b.store.contents(kept.id))).length).toBe(100);
        expect(await b.pieces(staged.id)).toBe(1);
        expect(await b.store.publish(rowOf(staged.id, who, 100))).toEqual({ ok: true });
        expect((await readAll(await b.store.contents(staged.id))).length).toBe(100);
        expect(await b.store.sweep(now)).toBe(0);
      } finally {
        await b.close();
      }
    });

    test("a key's page: newest first, by purpose, after a cursor; another key's files are not in it", async () => {
      const b = await make();
      try {
        const who = await owner(b, "page");
        const other = await owner(b, "page2");
        const ids: string[] = [];
        for (let i = 0; i < 5; i++) {
          const sink = await written(b.store, pattern(10));
          await b.store.publish(rowOf(sink.id, who, 10, { created_at: 1000 + i, purpose: i % 2 ? "batch_output" : "batch" }));
          ids.push(sink.id);
        }
        const theirs = await written(b.store, pattern(10));
        await b.store.publish(rowOf(theirs.id, other, 10));
        const all = (await b.store.page(who.key_id, { limit: 10 })).map((f) => f.id);
        expect(all).toEqual([...ids].reverse());
        expect((await b.store.page(who.key_id, { limit: 2, after: ids[3] })).map((f) => f.id)).toEqual([ids[2]!, ids[1]!]);
        expect((await b.store.page(who.key_id, { limit: 10, purpose: "batch" })).map((f) => f.id)).toEqual([ids[4]!, ids[2]!, ids[0]!]);
      } finally {
        await b.close();
      }
    });
  });
}

test("a file of the 50 MB limit is read back from PostgreSQL a chunk at a time", async () => {
  const b = await postgresBackend();
  try {
    const who = await owner(b, "big");
    const piece = pattern(CHUNK);
    const sink = await b.store.create();
    for (let i = 0; i < 50; i++) await sink.write(piece);
    await sink.close();
    await b.store.publish(rowOf(sink.id, who, 50 * CHUNK));
    const body = (await b.store.contents(sink.id)) as ReadableStream<Uint8Array>;
    let total = 0;
    let largest = 0;
    for await (const chunk of body) {
      total += chunk.length;
      largest = Math.max(largest, chunk.length);
    }
    expect(total).toBe(50 * CHUNK);
    expect(largest).toBe(CHUNK); // never more than a chunk in hand
  } finally {
    await b.close();
  }
}, 60_000);

test("the SQLite store keeps a published file's bytes under its id on disk", async () => {
  const b = await sqliteBackend();
  try {
    const who = await owner(b, "disk");
    const sink = await written(b.store, pattern(10));
    await b.store.publish(rowOf(sink.id, who, 10));
    expect(existsSync(join(b.store.localDir!, sink.id))).toBe(true);
  } finally {
    await b.close();
  }
});
