import type { SQL } from "bun";
import { fromConversationRow, likePattern, unchanged, type AppendOutcome, type Conversation, type ConversationStore } from "../conversations";

// The console's chat conversations on PostgreSQL (the interface and its rules: ../conversations.ts),
// on the synchronously committing pool (the console is told a message is kept). An append or a
// change locks the conversation's row (FOR UPDATE), so two appends at once run one after the other
// as on SQLite; a read locks it FOR SHARE, so the row and its messages are of one moment. Creations
// of one account are serialised by an advisory lock, so two at once cannot pass its bound together.

/** pg_advisory_xact_lock(class, hashtext(account)): the first key of the two-key space, "conv" in ASCII. */
const CREATE_LOCK = 0x636f6e76;

export function postgresConversationStore(sql: SQL): ConversationStore {
  return {
    async list({ accountId, search, limit }) {
      // ids compared bytewise (COLLATE "C"), as SQLite does, whatever the database's collation.
      const rows = search
        ? await sql`SELECT * FROM console_conversations WHERE account_id = ${accountId} AND title ILIKE ${likePattern(search)} ESCAPE '\\'
            ORDER BY updated_at DESC, id COLLATE "C" LIMIT ${limit}`
        : await sql`SELECT * FROM console_conversations WHERE account_id = ${accountId} ORDER BY updated_at DESC, id COLLATE "C" LIMIT ${limit}`;
      return rows.map(fromConversationRow);
    },

    async create(c, maxPerAccount) {
      return sql.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(${CREATE_LOCK}::int, hashtext(${c.accountId}))`;
        const [{ n }] = await tx`SELECT COUNT(*) AS n FROM console_conversations WHERE account_id = ${c.accountId}`;
        if (Number(n) >= maxPerAccount) return "too_many" as const;
        const [row] = await tx`INSERT INTO console_conversations (id, account_id, title, model, settings, message_count, bytes, created_at, updated_at)
          VALUES (${c.id}, ${c.accountId}, ${c.title}, ${c.model}, ${JSON.stringify(c.settings ?? {})}, 0, 0, ${c.now}, ${c.now}) RETURNING *`;
        return fromConversationRow(row);
      });
    },

    async read(accountId, id) {
      return sql.begin(async (tx) => {
        const [row] = await tx`SELECT * FROM console_conversations WHERE id = ${id} AND account_id = ${accountId} FOR SHARE`;
        if (!row) return null;
        const messages = await tx`SELECT seq, body FROM console_messages WHERE conversation_id = ${id} ORDER BY seq`;
        return { conversation: fromConversationRow(row), messages: messages.map((m: { seq: string; body: string }) => ({ seq: Number(m.seq), body: JSON.parse(m.body) })) };
      });
    },

    async update(accountId, id, change, now): Promise<Conversation | null> {
      if (unchanged(change)) {
        const [row] = await sql`SELECT * FROM console_conversations WHERE id = ${id} AND account_id = ${accountId}`;
        return row ? fromConversationRow(row) : null;
      }
      const settings = change.settings === undefined ? null : JSON.stringify(change.settings);
      const [row] = await sql`UPDATE console_conversations SET title = COALESCE(${change.title ?? null}::text, title),
          model = CASE WHEN ${change.model !== undefined} THEN ${change.model ?? null}::text ELSE model END,
          settings = COALESCE(${settings}::text, settings), updated_at = ${now}
        WHERE id = ${id} AND account_id = ${accountId} RETURNING *`;
      return row ? fromConversationRow(row) : null;
    },

    async remove(accountId, id) {
      return sql.begin(async (tx) => {
        const [row] = await tx`SELECT id FROM console_conversations WHERE id = ${id} AND account_id = ${accountId} FOR UPDATE`;
        if (!row) return false;
        await tx`DELETE FROM console_messages WHERE conversation_id = ${id}`;
        await tx`DELETE FROM console_conversations WHERE id = ${id}`;
        return true;
      });
    },

    async append(a, maxBytes): Promise<AppendOutcome> {
      return sql.begin(async (tx) => {
        const [row] = await tx`SELECT * FROM console_conversations WHERE id = ${a.id} AND account_id = ${a.accountId} FOR UPDATE`;
        if (!row) return { miss: "not_found" as const };
        const count = Number(row.message_count);
        if (count < a.keep || (a.count !== undefined && count !== a.count)) return { miss: "conflict" as const };
        const cut = count > a.keep ? Number((await tx`SELECT COALESCE(SUM(octet_length(body)), 0) AS n FROM console_messages WHERE conversation_id = ${a.id} AND seq >= ${a.keep}`)[0].n) : 0;
        const bodies = a.messages.map((m) => JSON.stringify(m));
        const bytes = Number(row.bytes) - cut + bodies.reduce((s, b) => s + Buffer.byteLength(b), 0);
        if (bytes > maxBytes) return { miss: "too_large" as const, bytes };
        if (count > a.keep) await tx`DELETE FROM console_messages WHERE conversation_id = ${a.id} AND seq >= ${a.keep}`;
        for (const [i, body] of bodies.entries()) await tx`INSERT INTO console_messages (conversation_id, seq, body) VALUES (${a.id}, ${a.keep + i}, ${body})`;
        const [after] = await tx`UPDATE console_conversations SET message_count = ${a.keep + bodies.length}, bytes = ${bytes}, updated_at = ${a.now} WHERE id = ${a.id} RETURNING *`;
        return { conversation: fromConversationRow(after), messages: a.messages.map((body, i) => ({ seq: a.keep + i, body })) };
      });
    },
  };
}
