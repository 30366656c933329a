import type { Database } from "bun:sqlite";

// The console's chat conversations (migration 022; issue 48), kept per account. The operations
// are few and domain-shaped, each one transaction, so PostgreSQL implements the same interface
// (pg/conversations.ts). The store does not know the console's message format: a message and the
// settings are opaque JSON values; src/2-services/console/conversations.ts validates them first.
// Every operation names the account: another account's conversation is not found.

export interface Conversation {
  id: string;
  accountId: string;
  title: string;
  model: string | null;
  settings: unknown;
  messageCount: number;
  /** UTF-8 bytes of the messages' JSON as stored. */
  bytes: number;
  /** Epoch ms. */
  createdAt: number;
  updatedAt: number;
}

/** A message at its position (0-based). */
export interface PositionedMessage {
  seq: number;
  body: unknown;
}

export interface NewConversation {
  id: string;
  accountId: string;
  title: string;
  model: string | null;
  settings: unknown;
  now: number;
}

export interface ConversationChange {
  title?: string;
  model?: string | null;
  settings?: unknown;
}

export interface ConversationAppend {
  accountId: string;
  id: string;
  /** Messages kept from the start; the rest are deleted before `messages` are added after them. */
  keep: number;
  /** The count the writer last saw: another count means another tab wrote since (conflict); absent, not checked. */
  count?: number;
  messages: unknown[];
  now: number;
}

/** What an append did: the conversation after it, or why nothing was written. */
export type AppendOutcome =
  | { conversation: Conversation; messages: PositionedMessage[] }
  /** not_found: no such conversation of the account; conflict: it holds fewer than `keep` messages (or not `count`); too_large: past maxBytes (`bytes`: what it would have held). */
  | { miss: "not_found" }
  | { miss: "conflict" }
  | { miss: "too_large"; bytes: number };

export interface ConversationStore {
  /** The account's conversations, most recently changed first (then by id); `search`: a case-insensitive substring of the title. */
  list(q: { accountId: string; search?: string; limit: number }): Promise<Conversation[]>;
  /** A new, empty conversation; "too_many" when the account already has `maxPerAccount`. */
  create(c: NewConversation, maxPerAccount: number): Promise<Conversation | "too_many">;
  /** One conversation with every message in order, read at one moment. */
  read(accountId: string, id: string): Promise<{ conversation: Conversation; messages: PositionedMessage[] } | null>;
  /** Sets what `change` names, and updated_at (a change naming nothing changes nothing); null when not found. */
  update(accountId: string, id: string, change: ConversationChange, now: number): Promise<Conversation | null>;
  /** Deletes the conversation and its messages; false when not found. */
  remove(accountId: string, id: string): Promise<boolean>;
  /** Cuts the conversation back to its first `keep` messages and appends `messages`, if it would hold at most `maxBytes`. */
  append(a: ConversationAppend, maxBytes: number): Promise<AppendOutcome>;
}

/** The `%`, `_` and `\` of a search taken literally in a LIKE pattern (ESCAPE '\'). */
export const likePattern = (search: string): string => `%${search.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
/** What a message's size counts: the UTF-8 bytes of its stored JSON (an inline image counts in full). */
export const bodyBytes = (body: unknown): number => Buffer.byteLength(JSON.stringify(body));

interface ConversationRow {
  id: string;
  account_id: string;
  title: string;
  model: string | null;
  settings: string;
  message_count: number;
  bytes: number;
  created_at: number;
  updated_at: number;
}

/** A change that names nothing: the conversation is left as it is (updated_at too). */
export const unchanged = (c: ConversationChange): boolean => c.title === undefined && c.model === undefined && c.settings === undefined;

/** A row of either store (PostgreSQL's BIGINTs come as strings) → a Conversation. */
export const fromConversationRow = (r: Record<string, any>): Conversation => ({
  id: r.id,
  accountId: r.account_id,
  title: r.title,
  model: r.model,
  settings: JSON.parse(r.settings),
  messageCount: Number(r.message_count),
  bytes: Number(r.bytes),
  createdAt: Number(r.created_at),
  updatedAt: Number(r.updated_at),
});

export function sqliteConversationStore(db: Database): ConversationStore {
  const q = {
    list: db.query<ConversationRow, { account: string; limit: number }>(
      "SELECT * FROM console_conversations WHERE account_id = $account ORDER BY updated_at DESC, id LIMIT $limit",
    ),
    // SQLite's LIKE ignores the case of ASCII letters (PostgreSQL's ILIKE: of every letter).
    search: db.query<ConversationRow, { account: string; pattern: string; limit: number }>(
      "SELECT * FROM console_conversations WHERE account_id = $account AND title LIKE $pattern ESCAPE '\\' ORDER BY updated_at DESC, id LIMIT $limit",
    ),
    count: db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM console_conversations WHERE account_id = ?"),
    insert: db.query(
      `INSERT INTO console_conversations (id, account_id, title, model, settings, message_count, bytes, created_at, updated_at)
       VALUES ($id, $account, $title, $model, $settings, 0, 0, $now, $now)`,
    ),
    get: db.query<ConversationRow, { id: string; account: string }>("SELECT * FROM console_conversations WHERE id = $id AND account_id = $account"),
    messages: db.query<{ seq: number; body: string }, [string]>("SELECT seq, body FROM console_messages WHERE conversation_id = ? ORDER BY seq"),
    update: db.query(
      `UPDATE console_conversations SET title = COALESCE($title, title), model = CASE WHEN $set_model THEN $model ELSE model END,
         settings = COALESCE($settings, settings), updated_at = $now WHERE id = $id`,
    ),
    removeMessages: db.query("DELETE FROM console_messages WHERE conversation_id = ?"),
    remove: db.query("DELETE FROM console_conversations WHERE id = ?"),
    // LENGTH of a BLOB counts bytes (of TEXT: characters).
    bytesFrom: db.query<{ n: number }, { id: string; keep: number }>(
      "SELECT COALESCE(SUM(LENGTH(CAST(body AS BLOB))), 0) AS n FROM console_messages WHERE conversation_id = $id AND seq >= $keep",
    ),
    cut: db.query("DELETE FROM console_messages WHERE conversation_id = $id AND seq >= $keep"),
    insertMessage: db.query("INSERT INTO console_messages (conversation_id, seq, body) VALUES ($id, $seq, $body)"),
    grown: db.query("UPDATE console_conversations SET message_count = $count, bytes = $bytes, updated_at = $now WHERE id = $id"),
  };

  const read = db.transaction((accountId: string, id: string) => {
    const row = q.get.get({ id, account: accountId });
    if (!row) return null;
    return { conversation: fromConversationRow(row), messages: q.messages.all(id).map((m) => ({ seq: m.seq, body: JSON.parse(m.body) })) };
  });

  const create = db.transaction((c: NewConversation, maxPerAccount: number): Conversation | "too_many" => {
    if (q.count.get(c.accountId)!.n >= maxPerAccount) return "too_many";
    q.insert.run({ id: c.id, account: c.accountId, title: c.title, model: c.model, settings: JSON.stringify(c.settings ?? {}), now: c.now });
    return fromConversationRow(q.get.get({ id: c.id, account: c.accountId })!);
  });

  const update = db.transaction((accountId: string, id: string, change: ConversationChange, now: number): Conversation | null => {
    const row = q.get.get({ id, account: accountId });
    if (!row) return null;
    if (unchanged(change)) return fromConversationRow(row);
    q.update.run({
      id,
      title: change.title ?? null,
      set_model: change.model !== undefined ? 1 : 0,
      model: change.model ?? null,
      settings: change.settings === undefined ? null : JSON.stringify(change.settings),
      now,
    });
    return fromConversationRow(q.get.get({ id, account: accountId })!);
  });

  const remove = db.transaction((accountId: string, id: string): boolean => {
    if (!q.get.get({ id, account: accountId })) return false;
    q.removeMessages.run(id);
    q.remove.run(id);
    return true;
  });

  const append = db.transaction((a: ConversationAppend, maxBytes: number): AppendOutcome => {
    const row = q.get.get({ id: a.id, account: a.accountId });
    if (!row) return { miss: "not_found" };
    if (row.message_count < a.keep || (a.count !== undefined && row.message_count !== a.count)) return { miss: "conflict" };
    const cut = row.message_count > a.keep ? q.bytesFrom.get({ id: a.id, keep: a.keep })!.n : 0;
    const bodies = a.messages.map((m) => JSON.stringify(m));
    const bytes = row.bytes - cut + bodies.reduce((s, b) => s + Buffer.byteLength(b), 0);
    if (bytes > maxBytes) return { miss: "too_large", bytes };
    if (row.message_count > a.keep) q.cut.run({ id: a.id, keep: a.keep });
    bodies.forEach((body, i) => q.insertMessage.run({ id: a.id, seq: a.keep + i, body }));
    q.grown.run({ id: a.id, count: a.keep + bodies.length, bytes, now: a.now });
    return {
      conversation: fromConversationRow(q.get.get({ id: a.id, account: a.accountId })!),
      messages: a.messages.map((body, i) => ({ seq: a.keep + i, body })),
    };
  });

  return {
    list: async ({ accountId, search, limit }) =>
      (search ? q.search.all({ account: accountId, pattern: likePattern(search), limit }) : q.list.all({ account: accountId, limit })).map(fromConversationRow),
    create: async (c, max) => create.immediate(c, max),
    read: async (accountId, id) => read(accountId, id),
    update: async (accountId, id, change, now) => update.immediate(accountId, id, change, now),
    remove: async (accountId, id) => remove.immediate(accountId, id),
    append: async (a, max) => append.immediate(a, max),
  };
}
