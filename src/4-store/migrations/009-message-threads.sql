-- Message threads on /v1/messages (Anthropic's beta message-threads-2026-08-12; issue 42): the
-- server holds a conversation between turns so a client sends only the new messages. A thread is
-- linear: only its latest reply (head_id) can be continued, once. Its messages are appended, never
-- rewritten, so a turn writes only what it adds. Each thread belongs to the key that created it.
CREATE TABLE message_threads (
  id TEXT PRIMARY KEY,
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  -- The latest reply's message id: the one `previous_message_id` may name.
  head_id TEXT NOT NULL UNIQUE,
  -- Fields a continue takes from the thread or must repeat unchanged (JSON; system and tools may be null).
  model TEXT NOT NULL,
  system TEXT,
  tools TEXT,
  -- Bytes of system, tools and every message as stored (images inline): the key's bounds sum them.
  bytes INTEGER NOT NULL,
  turns INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  used_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  -- A continue in flight: the request that claimed the head, and when its claim lapses if its process died.
  claimed_by TEXT,
  claim_expires_at INTEGER
);
CREATE INDEX message_threads_key ON message_threads(key_id, used_at);
CREATE INDEX message_threads_expiry ON message_threads(expires_at);

CREATE TABLE message_thread_messages (
  thread_id TEXT NOT NULL REFERENCES message_threads(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  -- A reply's message id (null for the client's messages): naming an earlier reply is thread_already_continued.
  message_id TEXT,
  body TEXT NOT NULL,
  PRIMARY KEY (thread_id, seq)
);
CREATE INDEX message_thread_messages_reply ON message_thread_messages(message_id) WHERE message_id IS NOT NULL;
