import type { Database } from "bun:sqlite";

// Message threads (migration 009): conversations the server holds between the turns of
// /v1/messages, for the key that created them. The operations are few and domain-shaped, each one
// transaction, so a PostgreSQL store can implement the same interface. The store does not know the
// Messages format: a message is an opaque JSON value; api/anthropic/threads.ts gives it meaning.

/** A thread as a continue needs it: what it was created with and every message so far. */
export interface ThreadState {
  id: string;
  model: string;
  system: unknown;
  tools: unknown;
  messages: unknown[];
  bytes: number;
}

/** Why a message id names no thread a continue may take. */
export type ThreadMiss = "not_found" | "already_continued" | "in_flight";
export type ThreadLookup = { thread: ThreadState } | { miss: ThreadMiss };

/** A message to append; a reply carries its message id (naming it again later is already_continued). */
export interface StoredMessage {
  body: unknown;
  replyId?: string;
}

/** A key's bounds: past them its least recently used threads are dropped (the client replays them). */
export interface ThreadBounds {
  maxThreads: number;
  maxBytes: number;
  /** One thread's largest size: a turn that would grow it past this keeps nothing. */
  maxThreadBytes: number;
}

export type KeepOutcome = "kept" | "too_large" | "claim_lost";

export interface NewThread {
  id: string;
  keyId: string;
  model: string;
  system: unknown;
  tools: unknown;
  messages: StoredMessage[];
  /** The reply's message id: the one the next turn continues from. */
  headId: string;
  now: number;
  expiresAt: number;
}

export interface ThreadAdvance {
  threadId: string;
  /** The request that claimed the thread. */
  owner: string;
  messages: StoredMessage[];
  headId: string;
  now: number;
  expiresAt: number;
}

export interface ThreadStore {
  /** The thread whose latest reply is `messageId`, claimed by `owner` for one continue until `leaseUntil`. */
  claim(q: { keyId: string; messageId: string; owner: string; now: number; leaseUntil: number }): Promise<ThreadLookup>;
  /** The same thread read without claiming it (counting a continue's tokens); never in_flight. */
  read(q: { keyId: string; messageId: string; now: number }): Promise<ThreadLookup>;
  /** A new thread; then the key's bounds are enforced on its other threads. */
  create(t: NewThread, bounds: ThreadBounds): Promise<KeepOutcome>;
  /** Appends a continue's messages and reply and moves the head to the reply; the claim ends. */
  advance(a: ThreadAdvance, bounds: ThreadBounds): Promise<KeepOutcome>;
  /** Ends `owner`'s claim without a reply (failed, cancelled, cut short): the head can be continued again. */
  release(threadId: string, owner: string): Promise<void>;
  /** Deletes the threads past their expiry; how many. */
  sweep(now: number): Promise<number>;
}

interface ThreadRow {
  id: string;
  key_id: string;
  head_id: string;
  model: string;
  system: string | null;
  tools: string | null;
  bytes: number;
  turns: number;
  expires_at: number;
  claimed_by: string | null;
  claim_expires_at: number | null;
}

const json = (v: unknown): string | null => (v === undefined || v === null ? null : JSON.stringify(v));
const parse = (s: string | null): unknown => (s === null ? undefined : JSON.parse(s));
/** What a thread's size counts: the UTF-8 bytes of its stored JSON (an inline image counts in full). */
export const jsonBytes = (v: unknown): number => (v === undefined || v === null ? 0 : Buffer.byteLength(JSON.stringify(v)));

export function sqliteThreadStore(db: Database): ThreadStore {
  const byHead = db.query<ThreadRow, [string]>("SELECT * FROM message_threads WHERE head_id = ?");
  const byReply = db.query<ThreadRow, [string]>(
    "SELECT t.* FROM message_thread_messages m JOIN message_threads t ON t.id = m.thread_id WHERE m.message_id = ?",
  );
  const messagesOf = db.query<{ body: string }, [string]>("SELECT body FROM message_thread_messages WHERE thread_id = ? ORDER BY seq");
  // A claimed thread outlives its claim: a long turn must not find its thread swept when it ends.
  const setClaim = db.query(
    "UPDATE message_threads SET claimed_by = $owner, claim_expires_at = $until, expires_at = MAX(expires_at, $until) WHERE id = $id",
  );
  const insertThread = db.query(
    `INSERT INTO message_threads (id, key_id, head_id, model, system, tools, bytes, turns, created_at, used_at, expires_at)
     VALUES ($id, $key_id, $head_id, $model, $system, $tools, $bytes, 1, $now, $now, $expires_at)`,
  );
  const insertMessage = db.query("INSERT INTO message_thread_messages (thread_id, seq, message_id, body) VALUES ($thread, $seq, $message_id, $body)");
  const nextSeq = db.query<{ n: number }, [string]>("SELECT COALESCE(MAX(seq) + 1, 0) AS n FROM message_thread_messages WHERE thread_id = ?");
  const claimed = db.query<ThreadRow, { id: string; owner: string }>("SELECT * FROM message_threads WHERE id = $id AND claimed_by = $owner");
  const moveHead = db.query(
    `UPDATE message_threads SET head_id = $head_id, bytes = $bytes, turns = turns + 1, used_at = $now, expires_at = $expires_at,
       claimed_by = NULL, claim_expires_at = NULL WHERE id = $id`,
  );
  const release = db.query("UPDATE message_threads SET claimed_by = NULL, claim_expires_at = NULL WHERE id = $id AND claimed_by = $owner");
  const remove = db.query("DELETE FROM message_threads WHERE id = ?");
  const sweep = db.query("DELETE FROM message_threads WHERE expires_at <= ?");
  const ofKey = db.query<{ id: string; bytes: number; claimed_by: string | null; claim_expires_at: number | null }, [string]>(
    "SELECT id, bytes, claimed_by, claim_expires_at FROM message_threads WHERE key_id = ? ORDER BY used_at, rowid",
  );

  const live = (row: ThreadRow | null, keyId: string, now: number): row is ThreadRow => row !== null && row.key_id === keyId && row.expires_at > now;
  const stateOf = (row: ThreadRow): ThreadState => ({
    id: row.id,
    model: row.model,
    system: parse(row.system),
    tools: parse(row.tools),
    messages: messagesOf.all(row.id).map((m) => JSON.parse(m.body)),
    bytes: row.bytes,
  });

  /** A thread of another key, or past its expiry, is not found: ids are not secrets, and no key may learn of another's. */
  const lookup = db.transaction((keyId: string, messageId: string, now: number, claim: { owner: string; until: number } | null): ThreadLookup => {
    const head = byHead.get(messageId);
    if (live(head, keyId, now)) {
      if (claim) {
        if (head.claimed_by !== null && (head.claim_expires_at ?? 0) > now) return { miss: "in_flight" };
        setClaim.run({ id: head.id, owner: claim.owner, until: claim.until });
      }
      return { thread: stateOf(head) };
    }
    return live(byReply.get(messageId), keyId, now) ? { miss: "already_continued" } : { miss: "not_found" };
  });

  const append = (threadId: string, messages: StoredMessage[]) => {
    let seq = nextSeq.get(threadId)!.n;
    for (const m of messages) insertMessage.run({ thread: threadId, seq: seq++, message_id: m.replyId ?? null, body: JSON.stringify(m.body) });
  };

  /** Drops the key's least recently used threads past its bounds, sparing `keep` and threads with a live claim. */
  const bound = (keyId: string, keep: string, bounds: ThreadBounds, now: number) => {
    const rows = ofKey.all(keyId);
    let count = rows.length;
    let bytes = rows.reduce((s, r) => s + r.bytes, 0);
    for (const r of rows) {
      if (count <= bounds.maxThreads && bytes <= bounds.maxBytes) break;
      if (r.id === keep || (r.claimed_by !== null && (r.claim_expires_at ?? 0) > now)) continue;
      remove.run(r.id);
      count -= 1;
      bytes -= r.bytes;
    }
  };

  const create = db.transaction((t: NewThread, bounds: ThreadBounds): KeepOutcome => {
    sweep.run(t.now);
    const bytes = jsonBytes(t.system) + jsonBytes(t.tools) + t.messages.reduce((s, m) => s + jsonBytes(m.body), 0);
    if (bytes > bounds.maxThreadBytes) return "too_large";
    insertThread.run({ id: t.id, key_id: t.keyId, head_id: t.headId, model: t.model, system: json(t.system), tools: json(t.tools), bytes, now: t.now, expires_at: t.expiresAt });
    append(t.id, t.messages);
    bound(t.keyId, t.id, bounds, t.now);
    return "kept";
  });

  const advance = db.transaction((a: ThreadAdvance, bounds: ThreadBounds): KeepOutcome => {
    sweep.run(a.now);
    // The claim may have lapsed and been taken by another request (or the thread dropped): keep nothing then.
    const row = claimed.get({ id: a.threadId, owner: a.owner });
    if (!row) return "claim_lost";
    const bytes = row.bytes + a.messages.reduce((s, m) => s + jsonBytes(m.body), 0);
    if (bytes > bounds.maxThreadBytes) {
      // Its head was answered: the thread cannot go on, and the client replays (thread_not_found).
      remove.run(row.id);
      return "too_large";
    }
    append(row.id, a.messages);
    moveHead.run({ id: row.id, head_id: a.headId, bytes, now: a.now, expires_at: a.expiresAt });
    bound(row.key_id, row.id, bounds, a.now);
    return "kept";
  });

  return {
    claim: async (q) => lookup.immediate(q.keyId, q.messageId, q.now, { owner: q.owner, until: q.leaseUntil }),
    read: async (q) => lookup(q.keyId, q.messageId, q.now, null),
    create: async (t, bounds) => create.immediate(t, bounds),
    advance: async (a, bounds) => advance.immediate(a, bounds),
    release: async (threadId, owner) => void release.run({ id: threadId, owner }),
    sweep: async (now) => sweep.run(now).changes,
  };
}
