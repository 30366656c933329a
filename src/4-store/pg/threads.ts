import type { SQL, TransactionSQL } from "bun";
import { jsonBytes, type KeepOutcome, type NewThread, type StoredMessage, type ThreadAdvance, type ThreadBounds, type ThreadLookup, type ThreadState, type ThreadStore } from "../threads";

// Message threads on PostgreSQL (the interface and its rules: ../threads.ts), on the synchronously
// committing pool (a kept turn is acknowledged to the client). A claim locks the thread's row
// (FOR UPDATE), so two processes continuing one reply at once find it in flight, as one process
// does; every operation is one transaction.

interface ThreadRow {
  id: string;
  key_id: string;
  head_id: string;
  model: string;
  system: string | null;
  tools: string | null;
  bytes: string;
  expires_at: string;
  claimed_by: string | null;
  claim_expires_at: string | null;
}

const json = (v: unknown): string | null => (v === undefined || v === null ? null : JSON.stringify(v));
const parse = (s: string | null): unknown => (s === null ? undefined : JSON.parse(s));

export function postgresThreadStore(sql: SQL): ThreadStore {
  const live = (row: ThreadRow | undefined, keyId: string, now: number): row is ThreadRow => row !== undefined && row.key_id === keyId && Number(row.expires_at) > now;

  async function stateOf(tx: SQL, row: ThreadRow): Promise<ThreadState> {
    const messages = await tx`SELECT body FROM message_thread_messages WHERE thread_id = ${row.id} ORDER BY seq`;
    return { id: row.id, model: row.model, system: parse(row.system), tools: parse(row.tools), messages: messages.map((m: { body: string }) => JSON.parse(m.body)), bytes: Number(row.bytes) };
  }

  /** A thread of another key, or past its expiry, is not found: ids are not secrets, and no key may learn of another's. */
  async function lookup(keyId: string, messageId: string, now: number, claim: { owner: string; until: number } | null): Promise<ThreadLookup> {
    return sql.begin(async (tx) => {
      const [head] = claim ? await tx`SELECT * FROM message_threads WHERE head_id = ${messageId} FOR UPDATE` : await tx`SELECT * FROM message_threads WHERE head_id = ${messageId}`;
      if (live(head, keyId, now)) {
        if (claim) {
          if (head.claimed_by !== null && Number(head.claim_expires_at ?? 0) > now) return { miss: "in_flight" as const };
          // A claimed thread outlives its claim: a long turn must not find its thread swept when it ends.
          await tx`UPDATE message_threads SET claimed_by = ${claim.owner}, claim_expires_at = ${claim.until}, expires_at = GREATEST(expires_at, ${claim.until}) WHERE id = ${head.id}`;
        }
        return { thread: await stateOf(tx, head) };
      }
      const [earlier] = await tx`SELECT t.* FROM message_thread_messages m JOIN message_threads t ON t.id = m.thread_id WHERE m.message_id = ${messageId}`;
      return live(earlier, keyId, now) ? { miss: "already_continued" as const } : { miss: "not_found" as const };
    });
  }

  async function append(tx: TransactionSQL, threadId: string, messages: StoredMessage[]) {
    const [next] = await tx`SELECT COALESCE(MAX(seq) + 1, 0) AS n FROM message_thread_messages WHERE thread_id = ${threadId}`;
    let seq = Number(next.n);
    for (const m of messages) await tx`INSERT INTO message_thread_messages (thread_id, seq, message_id, body) VALUES (${threadId}, ${seq++}, ${m.replyId ?? null}, ${JSON.stringify(m.body)})`;
  }

  /** Drops the key's least recently used threads past its bounds, sparing `keep` and threads with a live claim. */
  async function bound(tx: TransactionSQL, keyId: string, keep: string, bounds: ThreadBounds, now: number) {
    const rows = await tx`SELECT id, bytes, claimed_by, claim_expires_at FROM message_threads WHERE key_id = ${keyId} ORDER BY used_at, created_at, id`;
    let count = rows.length;
    let bytes = rows.reduce((s: number, r: { bytes: string }) => s + Number(r.bytes), 0);
    for (const r of rows) {
      if (count <= bounds.maxThreads && bytes <= bounds.maxBytes) break;
      if (r.id === keep || (r.claimed_by !== null && Number(r.claim_expires_at ?? 0) > now)) continue;
      await tx`DELETE FROM message_threads WHERE id = ${r.id}`;
      count -= 1;
      bytes -= Number(r.bytes);
    }
  }

  return {
    claim: (q) => lookup(q.keyId, q.messageId, q.now, { owner: q.owner, until: q.leaseUntil }),
    read: (q) => lookup(q.keyId, q.messageId, q.now, null),
    async create(t: NewThread, bounds: ThreadBounds): Promise<KeepOutcome> {
      return sql.begin(async (tx) => {
        await tx`DELETE FROM message_threads WHERE expires_at <= ${t.now}`;
        const bytes = jsonBytes(t.system) + jsonBytes(t.tools) + t.messages.reduce((s, m) => s + jsonBytes(m.body), 0);
        if (bytes > bounds.maxThreadBytes) return "too_large" as const;
        await tx`INSERT INTO message_threads (id, key_id, head_id, model, system, tools, bytes, turns, created_at, used_at, expires_at)
          VALUES (${t.id}, ${t.keyId}, ${t.headId}, ${t.model}, ${json(t.system)}, ${json(t.tools)}, ${bytes}, 1, ${t.now}, ${t.now}, ${t.expiresAt})`;
        await append(tx, t.id, t.messages);
        await bound(tx, t.keyId, t.id, bounds, t.now);
        return "kept" as const;
      });
    },
    async advance(a: ThreadAdvance, bounds: ThreadBounds): Promise<KeepOutcome> {
      return sql.begin(async (tx) => {
        await tx`DELETE FROM message_threads WHERE expires_at <= ${a.now}`;
        // The claim may have lapsed and been taken by another request (or the thread dropped): keep nothing then.
        const [row] = await tx`SELECT * FROM message_threads WHERE id = ${a.threadId} AND claimed_by = ${a.owner} FOR UPDATE`;
        if (!row) return "claim_lost" as const;
        const bytes = Number(row.bytes) + a.messages.reduce((s, m) => s + jsonBytes(m.body), 0);
        if (bytes > bounds.maxThreadBytes) {
          // Its head was answered: the thread cannot go on, and the client replays (thread_not_found).
          await tx`DELETE FROM message_threads WHERE id = ${row.id}`;
          return "too_large" as const;
        }
        await append(tx, row.id, a.messages);
        await tx`UPDATE message_threads SET head_id = ${a.headId}, bytes = ${bytes}, turns = turns + 1, used_at = ${a.now}, expires_at = ${a.expiresAt},
          claimed_by = NULL, claim_expires_at = NULL WHERE id = ${row.id}`;
        await bound(tx, row.key_id, row.id, bounds, a.now);
        return "kept" as const;
      });
    },
    async release(threadId, owner) {
      await sql`UPDATE message_threads SET claimed_by = NULL, claim_expires_at = NULL WHERE id = ${threadId} AND claimed_by = ${owner}`;
    },
    async sweep(now) {
      const gone = await sql`DELETE FROM message_threads WHERE expires_at <= ${now} RETURNING id`;
      return gone.length;
    },
  };
}
