import { sqliteAccountStore } from "../../src/4-store/accounts";
import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { createAccountService } from "../../src/2-services/accounts/service";
import { createBatchesService } from "../../src/2-services/batches/service";
import { systemClock } from "../../src/lib/clock";
import { validateConfig } from "../../src/lib/config";
import { createFilesService } from "../../src/2-services/files/service";
import { memoryLogger } from "../../src/lib/log";
import { sqliteBatchStore } from "../../src/4-store/batches";
import { openStore } from "../../src/4-store/db";
import { sqliteFileStore } from "../../src/4-store/files";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A batch created through the services on the data dir (no server running). */
async function makeBatch(): Promise<string> {
  const db = openStore(dir);
  try {
    const accounts = createAccountService(sqliteAccountStore(db), validateConfig({}).limits, systemClock);
    if (await accounts.accountCount() === 0) await accounts.createAccount("ops");
    const principal = (await accounts.authenticate((await accounts.createKey({ account: "ops", kind: "premium" })).key))!;
    const files = createFilesService({ store: sqliteFileStore(db, join(dir, "files")), clock: systemClock, logger: memoryLogger() });
    const file = await files.createResult(principal, "in.jsonl", (sink) => sink.write(Buffer.from("{}\n")));
    db.run("UPDATE files SET purpose = 'batch' WHERE id = ?", [file.id]);
    return (await createBatchesService({ store: sqliteBatchStore(db), files, clock: systemClock }).create(principal, { input_file_id: file.id, endpoint: "/v1/embeddings", completion_window: "24h" })).id;
  } finally {
    db.close();
  }
}

test("batches list, show and cancel work on the data dir", async () => {
  const id = await makeBatch();
  const list = cli(dir, ["batches", "list"]);
  expect(list.code).toBe(0);
  expect(list.stdout).toContain(id);
  expect(list.stdout).toContain("validating");
  expect(cli(dir, ["batches", "show", id, "--json"]).json()).toMatchObject({ id, status: "validating" });
  const cancelled = cli(dir, ["batches", "cancel", id, "--json"]);
  expect(cancelled.json().status).toBe("cancelling");
  expect(cli(dir, ["batches", "cancel", "batch_nope"]).stderr).toContain("No such Batch object");
});

test("show --watch prints progress until the batch ends", async () => {
  const id = await makeBatch();
  const db = openStore(dir);
  db.run("UPDATE batches SET status = 'completed', total = 4, completed = 3, failed = 1 WHERE id = ?", [id]);
  db.close();
  const r = cli(dir, ["batches", "show", id, "--watch", "--interval", "10"]);
  expect(r.code).toBe(0);
  expect(r.stdout).toContain("[##############################] 100% 4/4 (completed 3, failed 1) completed");
});
