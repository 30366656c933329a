-- PostgreSQL twin of migrations/009-message-threads.sql.
CREATE TABLE message_threads (
  id TEXT PRIMARY KEY,
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  head_id TEXT NOT NULL UNIQUE,
  model TEXT NOT NULL,
  system TEXT,
  tools TEXT,
  bytes BIGINT NOT NULL,
  turns BIGINT NOT NULL,
  created_at BIGINT NOT NULL,
  used_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  claimed_by TEXT,
  claim_expires_at BIGINT
);
CREATE INDEX message_threads_key ON message_threads(key_id, used_at);
CREATE INDEX message_threads_expiry ON message_threads(expires_at);

CREATE TABLE message_thread_messages (
  thread_id TEXT NOT NULL REFERENCES message_threads(id) ON DELETE CASCADE,
  seq BIGINT NOT NULL,
  message_id TEXT,
  body TEXT NOT NULL,
  PRIMARY KEY (thread_id, seq)
);
CREATE INDEX message_thread_messages_reply ON message_thread_messages(message_id) WHERE message_id IS NOT NULL;
