import { afterAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { validateConfig } from "../../src/lib/config";
import { openStore } from "../../src/4-store/db";
import { PG_MIGRATIONS } from "../../src/4-store/pg/db";
import { openPostgresStore } from "../../src/4-store/store";
import { checkStore, SKEW_WARN_MS } from "../../src/ops/doctor/store";
import { probeStore } from "../../src/ops/doctor/store-probe";
import { tempDir } from "../helpers/app";
import { freshDatabase } from "../helpers/postgres";

// `appliance doctor`'s store check (issue 44): the connection, the schema version, the clock skew
// to the database — probed on a real SQLite file and a real PostgreSQL, judged by a pure function.

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const config = (url = "") => validateConfig({ server: { data_dir: dir }, store: { url } });

describe("probed", () => {
  test("SQLite: absent, then at the schema this build writes", async () => {
    expect(checkStore(config(), await probeStore(config()))).toMatchObject({ status: "ok", detail: expect.stringContaining("empty") });
    openStore(dir).close();
    const facts = await probeStore(config());
    expect(facts).toMatchObject({ kind: "sqlite", error: null });
    expect(facts.schema).toBe(facts.known);
  });

  test("PostgreSQL: empty, then migrated; the skew to this machine's clock is measured", async () => {
    const url = await freshDatabase("doctor");
    const empty = await probeStore(config(url));
    expect(empty).toMatchObject({ kind: "postgres", error: null, schema: 0, known: PG_MIGRATIONS.length });
    await (await openPostgresStore(url)).close();
    const facts = await probeStore(config(url));
    expect(facts.schema).toBe(PG_MIGRATIONS.length);
    expect(Math.abs(facts.skewMs!)).toBeLessThan(SKEW_WARN_MS); // one machine: the same clock
    expect(checkStore(config(url), facts)).toMatchObject({ status: "ok", detail: expect.stringContaining(`schema ${PG_MIGRATIONS.length}`) });
  });

  test("PostgreSQL that cannot be reached fails, naming the URL without its password", async () => {
    const url = "postgres://appliance:s3cret@127.0.0.1:1/nothing";
    const facts = await probeStore(config(url));
    expect(facts.error).not.toBeNull();
    const check = checkStore(config(url), facts);
    expect(check.status).toBe("fail");
    expect(JSON.stringify(check)).not.toContain("s3cret");
    expect(check.hint).toContain("[store] url");
  });
});

describe("judged", () => {
  const pg = { kind: "postgres" as const, at: "postgres://a@db:5432/x", error: null, known: 16 };
  test("a newer schema fails; an older one is migrated at start", () => {
    expect(checkStore(config("postgres://a@db/x"), { ...pg, schema: 17, skewMs: 0 })).toMatchObject({ status: "fail", detail: expect.stringContaining("newer version") });
    expect(checkStore(config("postgres://a@db/x"), { ...pg, schema: 12, skewMs: 0 })).toMatchObject({ status: "ok", detail: expect.stringContaining("4 migration(s) to apply") });
  });

  test("a clock seconds off the database's warns, either way", () => {
    expect(checkStore(config("postgres://a@db/x"), { ...pg, schema: 16, skewMs: 3_500 })).toMatchObject({ status: "warn", detail: expect.stringContaining("3500 ms ahead") });
    expect(checkStore(config("postgres://a@db/x"), { ...pg, schema: 16, skewMs: -2_500 })).toMatchObject({ status: "warn", detail: expect.stringContaining("behind") });
    expect(checkStore(config("postgres://a@db/x"), { ...pg, schema: 16, skewMs: 40 }).status).toBe("ok");
  });
});
