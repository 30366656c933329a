-- File contents in the database (issue 44): a box keeps no file on its own disk, so every process
-- serves every file. A file's bytes are rows of at most 1 MiB in order (seq from 0); they are
-- written before the file's row exists (src/4-store/pg/files.ts), so a file being written, or one
-- whose writer died, is invisible: no `files` row names it (hence no foreign key). Chunks of no
-- live file older than a day are swept. created_at: the database's clock, epoch ms.
CREATE TABLE file_chunks (
  file_id TEXT NOT NULL,
  seq INT NOT NULL,
  data BYTEA NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (file_id, seq)
);
