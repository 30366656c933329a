import { sqliteAccountStore } from "../../src/4-store/accounts";
import { afterAll, afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { Database } from "bun:sqlite";
import { rmSync } from "node:fs";
import { createAccountService } from "../../src/2-services/accounts/service";
import { ManualClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { openStore } from "../../src/4-store/db";
import { connectPostgres, migratePostgres } from "../../src/4-store/pg/db";
import { postgresThreadStore } from "../../src/4-store/pg/threads";
import { jsonBytes, sqliteThreadStore, type NewThread, type ThreadBounds, type ThreadStore } from "../../src/4-store/threads";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// The thread store on a real SQLite file and on PostgreSQL (issue 44), one suite: the claims that
// make each reply continuable once and by one request at a time, the key that owns a thread,
// expiry, and the key's bounds.

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const HOUR = 3_600_000;
const roomy: ThreadBounds = { maxThreads: 100, maxBytes: 1 << 30, maxThreadBytes: 1 << 30 };

let store: ThreadStore;
let clock = new ManualClock();
let keyA: string;
let keyB: string;
/** How many messages the store holds for a thread. */
let messageCount: (threadId: string) => Promise<number>;
let close: () => Promise<void> = async () => {};

interface Opened {
  store: ThreadStore;
  keys: [string, string];
  messageCount: (threadId: string) => Promise<number>;
  close: () => Promise<void>;
}

async function onSqlite(): Promise<Opened> {
  const dir = tempDir();
  dirs.push(dir);
  const db: Database = openStore(dir, { synchronous: "normal" });
  const accounts = createAccountService(sqliteAccountStore(db), validateConfig({}).limits, clock);
  await accounts.createAccount("a");
  const keys: [string, string] = [(await accounts.createKey({ account: "a", kind: "premium" })).info.id, (await accounts.createKey({ account: "a", kind: "premium" })).info.id];
  const count = db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM message_thread_messages WHERE thread_id = ?");
  return { store: sqliteThreadStore(db), keys, messageCount: async (id) => count.get(id)!.n, close: async () => db.close() };
}

async function onPostgres(): Promise<Opened> {
  const pools = connectPostgres(await freshDatabase("threads"));
  await migratePostgres(pools.money);
  await pools.money`INSERT INTO accounts (id, name, created_at) VALUES ('acct_a', 'a', 1)`;
  for (const k of ["key_a1", "key_a2"]) await pools.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES (${k}, 'acct_a', 'premium', ${new Uint8Array(Buffer.from(k))}, 'abcd', 1)`;
  return {
    store: postgresThreadStore(pools.money),
    keys: ["key_a1", "key_a2"],
    messageCount: async (id) => Number((await pools.money`SELECT COUNT(*) AS n FROM message_thread_messages WHERE thread_id = ${id}`)[0].n),
    close: () => pools.close(),
  };
}

const BACKENDS = [["SQLite", onSqlite], ["PostgreSQL", onPostgres]] as const;

const user = (text: string) => ({ role: "user", content: text });
const reply = (text: string) => ({ role: "assistant", content: [{ type: "text", text }] });

let n = 0;
function thread(over: Partial<NewThread> = {}): NewThread {
  const id = `thr_${++n}`;
  return {
    id,
    keyId: keyA,
    model: "m",
    system: "be brief",
    tools: [{ name: "t", input_schema: { type: "object" } }],
    messages: [{ body: user("hi") }, { body: reply("hello"), replyId: `msg_${id}` }],
    headId: `msg_${id}`,
    now: clock.now(),
    expiresAt: clock.now() + 24 * HOUR,
    ...over,
  };
}
const claimOf = (keyId: string, messageId: string, owner = "req_1") => store.claim({ keyId, messageId, owner, now: clock.now(), leaseUntil: clock.now() + HOUR });

for (const [backend, open] of BACKENDS) {
  describe(`on ${backend}`, () => {
  beforeEach(async () => {
    clock = new ManualClock();
    const o = await open();
    ({ store, messageCount, close } = o);
    [keyA, keyB] = o.keys;
  });
  afterEach(() => close());

  describe("claims", () => {
    test("a created thread is claimed by its reply id, with what it was created with and every message", async () => {
      const t = thread();
      expect(await store.create(t, roomy)).toBe("kept");
      const got = await claimOf(keyA, t.headId);
      expect(got).toEqual({
        thread: {
          id: t.id,
          model: "m",
          system: "be brief",
          tools: [{ name: "t", input_schema: { type: "object" } }],
          messages: [user("hi"), reply("hello")],
          bytes: jsonBytes("be brief") + jsonBytes(t.tools) + jsonBytes(user("hi")) + jsonBytes(reply("hello")),
        },
      });
    });

    test("advance appends the turn and moves the head: the new reply continues, the old one is already_continued", async () => {
      const t = thread();
      await store.create(t, roomy);
      await claimOf(keyA, t.headId, "req_2");
      const out = await store.advance(
        { threadId: t.id, owner: "req_2", messages: [{ body: user("again") }, { body: reply("sure"), replyId: "msg_2" }], headId: "msg_2", now: clock.now(), expiresAt: clock.now() + HOUR },
        roomy,
      );
      expect(out).toBe("kept");
      expect(await claimOf(keyA, t.headId, "req_3")).toEqual({ miss: "already_continued" });
      const next = await claimOf(keyA, "msg_2", "req_3");
      expect("thread" in next && next.thread.messages).toEqual([user("hi"), reply("hello"), user("again"), reply("sure")]);
    });

    test("a second claim while the first is live is in_flight; after release, or once the lease lapsed, it is taken", async () => {
      const t = thread();
      await store.create(t, roomy);
      expect("thread" in (await claimOf(keyA, t.headId, "req_1"))).toBe(true);
      expect(await claimOf(keyA, t.headId, "req_2")).toEqual({ miss: "in_flight" });
      // Reading (count_tokens) never waits on a claim.
      expect("thread" in (await store.read({ keyId: keyA, messageId: t.headId, now: clock.now() }))).toBe(true);
      await store.release(t.id, "req_2"); // not its claim: nothing changes
      expect(await claimOf(keyA, t.headId, "req_2")).toEqual({ miss: "in_flight" });
      await store.release(t.id, "req_1");
      expect("thread" in (await claimOf(keyA, t.headId, "req_2"))).toBe(true);
      clock.advance(HOUR + 1);
      expect("thread" in (await claimOf(keyA, t.headId, "req_3"))).toBe(true);
    });

    test("a claim taken over after its lease lapsed keeps nothing for the first owner", async () => {
      const t = thread();
      await store.create(t, roomy);
      await claimOf(keyA, t.headId, "req_1");
      clock.advance(HOUR + 1);
      await claimOf(keyA, t.headId, "req_2");
      const turn = { messages: [{ body: reply("late"), replyId: "msg_late" }], headId: "msg_late", now: clock.now(), expiresAt: clock.now() + HOUR };
      expect(await store.advance({ threadId: t.id, owner: "req_1", ...turn }, roomy)).toBe("claim_lost");
      expect(await store.advance({ threadId: t.id, owner: "req_2", ...turn }, roomy)).toBe("kept");
    });

    test("another key's thread is not found, by its head or an earlier reply", async () => {
      const t = thread();
      await store.create(t, roomy);
      expect(await claimOf(keyB, t.headId)).toEqual({ miss: "not_found" });
      expect(await store.read({ keyId: keyB, messageId: t.headId, now: clock.now() })).toEqual({ miss: "not_found" });
      expect(await claimOf(keyA, "msg_never")).toEqual({ miss: "not_found" });
    });
  });

  describe("expiry", () => {
    test("a thread past its expiry is not found, and the next write sweeps it with its messages", async () => {
      const t = thread({ expiresAt: clock.now() + HOUR });
      await store.create(t, roomy);
      clock.advance(HOUR);
      expect(await claimOf(keyA, t.headId)).toEqual({ miss: "not_found" });
      await store.create(thread(), roomy);
      expect(await messageCount(t.id)).toBe(0);
      expect(await store.sweep(clock.now())).toBe(0);
    });

    test("a claimed thread outlives its claim: a turn longer than the time left is still kept", async () => {
      const t = thread({ expiresAt: clock.now() + 60_000 });
      await store.create(t, roomy);
      await claimOf(keyA, t.headId, "req_1");
      clock.advance(120_000);
      const turn = { threadId: t.id, owner: "req_1", messages: [{ body: reply("x"), replyId: "msg_x" }], headId: "msg_x", now: clock.now(), expiresAt: clock.now() + HOUR };
      expect(await store.advance(turn, roomy)).toBe("kept");
    });
  });

  describe("bounds", () => {
    test("past the key's thread count the least recently used is dropped; other keys are untouched", async () => {
      const bounds = { ...roomy, maxThreads: 2 };
      const other = thread({ keyId: keyB });
      await store.create(other, bounds);
      const [t1, t2, t3] = [thread(), thread(), thread()];
      await store.create(t1, bounds);
      clock.advance(1);
      await store.create(t2, bounds);
      clock.advance(1);
      // t1 is used again (a continue), so t2 is now the least recently used.
      await claimOf(keyA, t1.headId, "req_1");
      await store.advance({ threadId: t1.id, owner: "req_1", messages: [{ body: reply("r"), replyId: "msg_r" }], headId: "msg_r", now: clock.now(), expiresAt: clock.now() + HOUR }, bounds);
      clock.advance(1);
      await store.create(t3, bounds);
      expect(await claimOf(keyA, t2.headId, "req_9")).toEqual({ miss: "not_found" });
      expect("thread" in (await claimOf(keyA, "msg_r", "req_9"))).toBe(true);
      expect("thread" in (await claimOf(keyA, t3.headId, "req_9"))).toBe(true);
      expect("thread" in (await claimOf(keyB, other.headId, "req_9"))).toBe(true);
    });

    test("past the key's bytes the oldest threads go (an inline image counts in full), but not one under a live claim", async () => {
      const image = { role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "A".repeat(10_000) } }] };
      const big = (id: string) => thread({ id, headId: `msg_${id}`, messages: [{ body: image }, { body: reply("ok"), replyId: `msg_${id}` }] });
      const size = jsonBytes(image) + jsonBytes(reply("ok")) + jsonBytes("be brief") + jsonBytes(thread().tools);
      const bounds = { ...roomy, maxBytes: 2 * size };
      const [b1, b2, b3, b4] = [big("b1"), big("b2"), big("b3"), big("b4")];
      await store.create(b1, bounds);
      await claimOf(keyA, b1.headId, "req_1"); // b1 is being continued: spared
      clock.advance(1);
      await store.create(b2, bounds);
      clock.advance(1);
      await store.create(b3, bounds);
      expect(await claimOf(keyA, b2.headId, "req_2")).toEqual({ miss: "not_found" });
      expect(await claimOf(keyA, b1.headId, "req_2")).toEqual({ miss: "in_flight" });
      await store.release(b1.id, "req_1");
      clock.advance(1);
      await store.create(b4, bounds);
      expect(await claimOf(keyA, b1.headId, "req_2")).toEqual({ miss: "not_found" });
      expect("thread" in (await claimOf(keyA, b4.headId, "req_2"))).toBe(true);
    });

    test("a thread that would grow past one thread's bound keeps nothing: a create is not stored, a continue ends the thread", async () => {
      const bounds = { ...roomy, maxThreadBytes: 400 };
      const huge = thread({ messages: [{ body: user("x".repeat(500)) }, { body: reply("ok"), replyId: "msg_huge" }], headId: "msg_huge" });
      expect(await store.create(huge, bounds)).toBe("too_large");
      expect(await claimOf(keyA, "msg_huge")).toEqual({ miss: "not_found" });
      const t = thread();
      await store.create(t, bounds);
      await claimOf(keyA, t.headId, "req_1");
      const turn = { threadId: t.id, owner: "req_1", messages: [{ body: user("y".repeat(400)) }, { body: reply("r"), replyId: "msg_r2" }], headId: "msg_r2", now: clock.now(), expiresAt: clock.now() + HOUR };
      expect(await store.advance(turn, bounds)).toBe("too_large");
      expect(await claimOf(keyA, t.headId, "req_2")).toEqual({ miss: "not_found" });
      expect(await claimOf(keyA, "msg_r2", "req_2")).toEqual({ miss: "not_found" });
    });
  });
  });
}

describe("the server's sweep", () => {
  test("a server starting on a data dir deletes the threads that expired while it was down", async () => {
    const { startServer } = await import("../../src/main");
    const { memoryLogger } = await import("../../src/lib/log");
    const dir = tempDir();
    dirs.push(dir);
    const first = openStore(dir, { synchronous: "normal" });
    const accounts = createAccountService(sqliteAccountStore(first), validateConfig({}).limits, clock);
    await accounts.createAccount("sweep");
    const key = (await accounts.createKey({ account: "sweep", kind: "premium" })).info.id;
    const gone = sqliteThreadStore(first);
    // The live one first: a write sweeps what expired before its own `now`.
    await gone.create(thread({ keyId: key, now: Date.now(), expiresAt: Date.now() + HOUR }), roomy);
    await gone.create(thread({ keyId: key, now: Date.now() - 2 * HOUR, expiresAt: Date.now() - HOUR }), roomy);
    expect(first.query("SELECT COUNT(*) AS n FROM message_threads").get()).toEqual({ n: 2 });
    first.close();
    const s = await startServer(validateConfig({ server: { data_dir: dir, port: 0 } }), { logger: memoryLogger(), banner: () => {} });
    try {
      expect(s.deps.db!.query("SELECT COUNT(*) AS n FROM message_threads").get()).toEqual({ n: 1 });
    } finally {
      await s.stop();
    }
  }, 60_000);
});

test("PostgreSQL: processes claiming one reply at once — exactly one takes it, the others find it in flight", async () => {
  const url = await freshDatabase("threads_race");
  const pools = [connectPostgres(url), connectPostgres(url), connectPostgres(url)];
  try {
    await migratePostgres(pools[0]!.money);
    await pools[0]!.money`INSERT INTO accounts (id, name, created_at) VALUES ('acct_r', 'r', 1)`;
    await pools[0]!.money`INSERT INTO api_keys (id, account_id, kind, secret_hash, last4, created_at) VALUES ('key_r', 'acct_r', 'premium', ${new Uint8Array([7])}, 'abcd', 1)`;
    const stores = pools.map((p) => postgresThreadStore(p.money));
    const t = thread({ keyId: "key_r" });
    expect(await stores[0]!.create(t, roomy)).toBe("kept");
    const claims = await Promise.all(
      Array.from({ length: 12 }, (_, i) => stores[i % 3]!.claim({ keyId: "key_r", messageId: t.headId, owner: `req_${i}`, now: clock.now(), leaseUntil: clock.now() + HOUR })),
    );
    expect(claims.filter((c) => "thread" in c)).toHaveLength(1);
    expect(claims.filter((c) => "miss" in c && c.miss === "in_flight")).toHaveLength(11);
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
}, 30_000);
