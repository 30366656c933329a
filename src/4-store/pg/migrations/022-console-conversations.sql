-- PostgreSQL twin of migrations/022-console-conversations.sql.
CREATE TABLE console_conversations (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  title TEXT NOT NULL,
  model TEXT,
  settings TEXT NOT NULL,
  message_count BIGINT NOT NULL,
  bytes BIGINT NOT NULL,
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX console_conversations_account ON console_conversations(account_id, updated_at);

CREATE TABLE console_messages (
  conversation_id TEXT NOT NULL REFERENCES console_conversations(id) ON DELETE CASCADE,
  seq BIGINT NOT NULL,
  body TEXT NOT NULL,
  PRIMARY KEY (conversation_id, seq)
);
