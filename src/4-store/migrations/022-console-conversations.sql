-- The console's chat conversations (issue 48): kept per signed-in account, listed by the time they
-- last changed. A conversation's messages are positions 0..n-1 (seq); an append may first cut the
-- conversation back to its first `keep` messages (edit-and-resend, regenerate). Each message is
-- the JSON the console sent (validated by src/2-services/console/conversations.ts), images inline.
CREATE TABLE console_conversations (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  title TEXT NOT NULL,
  model TEXT,
  -- The chat settings (system prompt, temperature, …) as JSON.
  settings TEXT NOT NULL,
  message_count INTEGER NOT NULL,
  -- UTF-8 bytes of the messages' JSON as stored: a conversation holds at most the service's bound.
  bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX console_conversations_account ON console_conversations(account_id, updated_at);

CREATE TABLE console_messages (
  conversation_id TEXT NOT NULL REFERENCES console_conversations(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  body TEXT NOT NULL,
  PRIMARY KEY (conversation_id, seq)
);
