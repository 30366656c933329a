import { afterAll, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { openStore } from "../../src/4-store/db";
import { tempDir } from "../helpers/app";

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("a killed process loses nothing it acknowledged", async () => {
  const child = Bun.spawn([process.execPath, join(import.meta.dir, "fixtures", "writer.ts"), dir], { stdout: "pipe", stderr: "inherit" });
  let acked = 0;
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of child.stdout) {
    buf += decoder.decode(chunk);
    const lines = buf.split("\n");
    buf = lines.pop()!;
    for (const l of lines) if (l.startsWith("ack ")) acked = Number(l.slice(4));
    if (acked >= 200) {
      child.kill("SIGKILL");
      break;
    }
  }
  await child.exited;
  expect(child.signalCode).toBe("SIGKILL");

  const db = openStore(dir);
  const credits = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM credits").get()!.n;
  const usage = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM usage").get()!.n;
  const account = db.query<{ balance_micros: number }, []>("SELECT balance_micros FROM accounts WHERE name = 'durable'").get()!;
  const sums = db.query<{ credit: number; cost: number }, []>(
    "SELECT (SELECT SUM(amount_micros) FROM credits) AS credit, (SELECT SUM(cost_micros) FROM usage) AS cost",
  ).get()!;
  db.close();
  // Every acknowledged credit and settlement is there (one more may have committed unacknowledged).
  expect(credits).toBeGreaterThanOrEqual(acked);
  expect(usage).toBeGreaterThanOrEqual(acked);
  expect(usage).toBeLessThanOrEqual(credits);
  // And the balance agrees with the ledger exactly.
  expect(account.balance_micros).toBe(sums.credit - sums.cost);
}, 60_000);
