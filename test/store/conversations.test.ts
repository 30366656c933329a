import { afterAll, afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { Database } from "bun:sqlite";
import { rmSync } from "node:fs";
import { bodyBytes, sqliteConversationStore, type ConversationStore, type NewConversation } from "../../src/4-store/conversations";
import { openStore } from "../../src/4-store/db";
import { connectPostgres, migratePostgres } from "../../src/4-store/pg/db";
import { postgresConversationStore } from "../../src/4-store/pg/conversations";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// The console's conversation store on a real SQLite file and on PostgreSQL (issue 48), one suite:
// create, list, search, rename, delete, append and truncate — each one transaction — the bounds,
// and one account never reaching another's conversations.

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const A = "acct_a";
const B = "acct_b";
const ROOMY = 1 << 30;

interface Opened {
  store: ConversationStore;
  /** Rows of console_messages for a conversation (deleted ones included, if any were left). */
  messageRows: (id: string) => Promise<number>;
  close: () => Promise<void>;
}

async function onSqlite(): Promise<Opened> {
  const dir = tempDir();
  dirs.push(dir);
  const db: Database = openStore(dir, { synchronous: "normal" });
  for (const id of [A, B]) db.run("INSERT INTO accounts (id, name, created_at) VALUES (?, ?, 1)", [id, id]);
  const count = db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM console_messages WHERE conversation_id = ?");
  return { store: sqliteConversationStore(db), messageRows: async (id) => count.get(id)!.n, close: async () => db.close() };
}

async function onPostgres(): Promise<Opened> {
  const pools = connectPostgres(await freshDatabase("conversations"));
  await migratePostgres(pools.money);
  for (const id of [A, B]) await pools.money`INSERT INTO accounts (id, name, created_at) VALUES (${id}, ${id}, 1)`;
  return {
    store: postgresConversationStore(pools.money),
    messageRows: async (id) => Number((await pools.money`SELECT COUNT(*) AS n FROM console_messages WHERE conversation_id = ${id}`)[0].n),
    close: () => pools.close(),
  };
}

const BACKENDS = [["SQLite", onSqlite], ["PostgreSQL", onPostgres]] as const;

let store: ConversationStore;
let messageRows: Opened["messageRows"];
let close: () => Promise<void> = async () => {};
let now = 1_000_000;
let n = 0;

function conv(over: Partial<NewConversation> = {}): NewConversation {
  return { id: `conv_${String(++n).padStart(4, "0")}`, accountId: A, title: `chat ${n}`, model: "m", settings: { temperature: 0.5 }, now: ++now, ...over };
}
async function made(over: Partial<NewConversation> = {}) {
  const c = await store.create(conv(over), 1_000);
  if (c === "too_many") throw new Error("too many");
  return c;
}
const msg = (role: "user" | "assistant", content: string) => ({ role, content });
const append = (id: string, keep: number, messages: unknown[], o: { accountId?: string; maxBytes?: number; count?: number } = {}) =>
  store.append({ accountId: o.accountId ?? A, id, keep, ...(o.count !== undefined ? { count: o.count } : {}), messages, now: ++now }, o.maxBytes ?? ROOMY);
const bodiesOf = async (id: string) => (await store.read(A, id))!.messages;

for (const [backend, open] of BACKENDS) {
  describe(`on ${backend}`, () => {
    beforeEach(async () => {
      ({ store, messageRows, close } = await open());
    });
    afterEach(() => close());

    test("a created conversation is empty and listed with what it was created with", async () => {
      const c = await made({ title: "First", model: null, settings: { system: "be brief", image: { n: 2 } } });
      expect(c).toEqual({ id: c.id, accountId: A, title: "First", model: null, settings: { system: "be brief", image: { n: 2 } }, messageCount: 0, bytes: 0, createdAt: now, updatedAt: now });
      expect(await store.list({ accountId: A, limit: 100 })).toEqual([c]);
      expect(await store.read(A, c.id)).toEqual({ conversation: c, messages: [] });
    });

    test("the list is most recently changed first, then by id, and stops at the limit", async () => {
      const same = ++now;
      const [x, y, z] = [await made({ id: "conv_b", now: same }), await made({ id: "conv_a", now: same }), await made({ id: "conv_c", now: same - 10 })];
      expect((await store.list({ accountId: A, limit: 100 })).map((c) => c.id)).toEqual([y.id, x.id, z.id]);
      await append(z.id, 0, [msg("user", "hi")]);
      expect((await store.list({ accountId: A, limit: 2 })).map((c) => c.id)).toEqual([z.id, y.id]);
    });

    test("search is a case-insensitive substring of the title, with % _ and \\ taken literally", async () => {
      const titles = ["100% Done", "100 percent", "a_b", "axb", "back\\slash", "backslash", "Ünïcode"];
      for (const title of titles) await made({ title });
      const found = async (search: string) => (await store.list({ accountId: A, search, limit: 100 })).map((c) => c.title).sort();
      expect(await found("done")).toEqual(["100% Done"]);
      expect(await found("%")).toEqual(["100% Done"]);
      expect(await found("0%")).toEqual(["100% Done"]);
      expect(await found("_")).toEqual(["a_b"]);
      expect(await found("\\")).toEqual(["back\\slash"]);
      expect(await found("BACK")).toEqual(["back\\slash", "backslash"]);
      expect(await found("nïc")).toEqual(["Ünïcode"]);
      expect(await found("nothing")).toEqual([]);
    });

    test("an update sets what it names and updated_at; an empty one changes nothing", async () => {
      const c = await made();
      const renamed = (await store.update(A, c.id, { title: "Renamed" }, ++now))!;
      expect(renamed).toMatchObject({ title: "Renamed", model: "m", settings: { temperature: 0.5 }, updatedAt: now, createdAt: c.createdAt });
      const cleared = (await store.update(A, c.id, { model: null, settings: { max_tokens: 9 } }, ++now))!;
      expect(cleared).toMatchObject({ title: "Renamed", model: null, settings: { max_tokens: 9 }, updatedAt: now });
      expect(await store.update(A, c.id, {}, now + 50)).toEqual(cleared);
      expect(await store.update(A, "conv_none", { title: "x" }, ++now)).toBeNull();
    });

    test("a deleted conversation is gone with its messages", async () => {
      const c = await made();
      await append(c.id, 0, [msg("user", "hi"), msg("assistant", "hello")]);
      expect(await messageRows(c.id)).toBe(2);
      expect(await store.remove(A, c.id)).toBe(true);
      expect(await messageRows(c.id)).toBe(0);
      expect(await store.read(A, c.id)).toBeNull();
      expect(await store.list({ accountId: A, limit: 100 })).toEqual([]);
      expect(await store.remove(A, c.id)).toBe(false);
    });

    test("appends continue the positions, count the messages' bytes and move updated_at", async () => {
      const c = await made();
      const first = [msg("user", "héllo ✓"), msg("assistant", "hi")];
      const out = await append(c.id, 0, first);
      expect(out).toEqual({ conversation: { ...c, messageCount: 2, bytes: first.reduce((s, m) => s + bodyBytes(m), 0), updatedAt: now }, messages: first.map((body, seq) => ({ seq, body })) });
      const more = await append(c.id, 2, [msg("user", "again")]);
      expect("messages" in more && more.messages).toEqual([{ seq: 2, body: msg("user", "again") }]);
      expect(await bodiesOf(c.id)).toEqual([...first, msg("user", "again")].map((body, seq) => ({ seq, body })));
    });

    test("keep cuts the conversation back before appending (regenerate, edit-and-resend); the byte total follows", async () => {
      const c = await made();
      await append(c.id, 0, [msg("user", "one"), msg("assistant", "ünïcödé reply"), msg("user", "three"), msg("assistant", "four")]);
      const regen = await append(c.id, 3, [msg("assistant", "another four")]);
      expect("conversation" in regen && regen.conversation.messageCount).toBe(4);
      const edited = await append(c.id, 0, [msg("user", "edited one")]);
      const kept = [msg("user", "edited one")];
      expect("conversation" in edited && edited.conversation).toMatchObject({ messageCount: 1, bytes: bodyBytes(kept[0]) });
      expect(await bodiesOf(c.id)).toEqual([{ seq: 0, body: kept[0] }]);
      expect(await messageRows(c.id)).toBe(1);
      // keep equal to the count and no messages: nothing changes but updated_at.
      expect(await append(c.id, 1, [])).toMatchObject({ conversation: { messageCount: 1, bytes: bodyBytes(kept[0]) }, messages: [] });
    });

    test("keep past what the conversation holds is a conflict, and nothing is written", async () => {
      const c = await made();
      await append(c.id, 0, [msg("user", "a")]);
      const before = await store.read(A, c.id);
      expect(await append(c.id, 2, [msg("user", "b")])).toEqual({ miss: "conflict" });
      expect(await store.read(A, c.id)).toEqual(before);
    });

    test("appends at once with the same keep run one after the other: the conversation ends with one of them whole, no position twice", async () => {
      const c = await made();
      await append(c.id, 0, [msg("user", "q"), msg("assistant", "a")]);
      const outs = await Promise.all(Array.from({ length: 8 }, (_, i) => append(c.id, 2, [msg("user", `q${i}`), msg("assistant", `a${i}`)])));
      expect(outs.every((o) => "conversation" in o && o.conversation.messageCount === 4)).toBe(true);
      const got = await store.read(A, c.id);
      expect(got!.messages.map((m) => m.seq)).toEqual([0, 1, 2, 3]);
      expect(await messageRows(c.id)).toBe(4);
      const winner = (got!.messages[2]!.body as { content: string }).content.slice(1);
      expect(got!.messages.map((m) => m.body)).toEqual([msg("user", "q"), msg("assistant", "a"), msg("user", `q${winner}`), msg("assistant", `a${winner}`)]);
      expect(got!.conversation.bytes).toBe(got!.messages.reduce((s, m) => s + bodyBytes(m.body), 0));
      // Each append saw the one before it whole: a longer keep that arrives after a cut is a conflict, never a gap.
      const [cut, late] = await Promise.all([append(c.id, 0, []), append(c.id, 4, [msg("user", "late")])]);
      expect("conversation" in cut).toBe(true);
      const after = await store.read(A, c.id);
      expect(after!.messages.map((m) => m.seq)).toEqual(after!.messages.map((_, i) => i));
      if ("miss" in late) expect(late).toEqual({ miss: "conflict" });
    });

    test("appends at once that say the count they saw (two tabs): exactly one wins, the others are conflicts and write nothing", async () => {
      const c = await made();
      await append(c.id, 0, [msg("user", "q"), msg("assistant", "a")]);
      const outs = await Promise.all(Array.from({ length: 8 }, (_, i) => append(c.id, 2, [msg("user", `q${i}`), msg("assistant", `a${i}`)], { count: 2 })));
      const won = outs.filter((o) => "conversation" in o);
      expect(won).toHaveLength(1);
      expect(outs.filter((o) => "miss" in o && o.miss === "conflict")).toHaveLength(7);
      const got = await store.read(A, c.id);
      expect(got!.messages.map((m) => m.seq)).toEqual([0, 1, 2, 3]);
      expect(await messageRows(c.id)).toBe(4);
      // A regenerate that knows the count (4) cuts back to 3 and appends; one that saw 2 is refused.
      expect("conversation" in (await append(c.id, 3, [msg("assistant", "again")], { count: 4 }))).toBe(true);
      expect(await append(c.id, 1, [msg("assistant", "stale")], { count: 2 })).toEqual({ miss: "conflict" });
    });

    test("an append past the byte bound writes nothing; a cut that frees room lets the next one in", async () => {
      const c = await made();
      const big = msg("assistant", "x".repeat(600));
      expect("conversation" in (await append(c.id, 0, [msg("user", "q"), big], { maxBytes: 1000 }))).toBe(true);
      const before = await store.read(A, c.id);
      const refused = await append(c.id, 2, [big], { maxBytes: 1000 });
      expect(refused).toEqual({ miss: "too_large", bytes: before!.conversation.bytes + bodyBytes(big) });
      expect(await store.read(A, c.id)).toEqual(before);
      // Regenerating the big reply (keep 1) fits: the cut message no longer counts.
      expect(await append(c.id, 1, [big], { maxBytes: 1000 })).toMatchObject({ conversation: { messageCount: 2, bytes: before!.conversation.bytes } });
    });

    test("an account keeps at most its bound of conversations, even when creations race", async () => {
      const results = await Promise.all(Array.from({ length: 6 }, () => store.create(conv(), 3)));
      expect(results.filter((r) => r === "too_many").length).toBe(3);
      expect((await store.list({ accountId: A, limit: 100 })).length).toBe(3);
      expect(await store.create(conv(), 3)).toBe("too_many");
      // Another account has its own count.
      expect(await store.create(conv({ accountId: B }), 3)).not.toBe("too_many");
    });

    test("another account's conversation is never found, listed, changed, appended to or deleted", async () => {
      const c = await made();
      await append(c.id, 0, [msg("user", "secret")]);
      const before = await store.read(A, c.id);
      expect(await store.read(B, c.id)).toBeNull();
      expect(await store.list({ accountId: B, limit: 100 })).toEqual([]);
      expect(await store.list({ accountId: B, search: "chat", limit: 100 })).toEqual([]);
      expect(await store.update(B, c.id, { title: "mine" }, ++now)).toBeNull();
      expect(await append(c.id, 0, [msg("user", "mine")], { accountId: B })).toEqual({ miss: "not_found" });
      expect(await store.remove(B, c.id)).toBe(false);
      expect(await store.read(A, c.id)).toEqual(before);
    });
  });
}
