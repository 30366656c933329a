import { afterAll, beforeAll, expect, test } from "bun:test";
import { Prng } from "../../helpers/fuzz/prng";
import { fuzzSchema } from "../../helpers/fuzz/schemas";
import { ENTRY_POINTS } from "./entry-points";
import { errorOf, post, startAttackServer, whileOthersAsk, type AttackServer } from "./server";

// Random and adversarial JSON Schemas (test/helpers/fuzz/schemas.ts) thrown at every place a
// schema enters, against a real server process, for a bounded time from a fixed seed (SCHEMA_FUZZ_SEED
// and SCHEMA_FUZZ_S change them): never a 5xx or a dropped connection, always an answer or a named
// 400 in the endpoint's format, the process alive and another user answered within a bound.

const SEED = Number(process.env.SCHEMA_FUZZ_SEED ?? 20261128);
const SECONDS = Number(process.env.SCHEMA_FUZZ_S ?? 25);

let s: AttackServer;
beforeAll(async () => {
  s = await startAttackServer();
}, 180_000);
afterAll(() => s.stop());

test(`schema fuzz: ${SECONDS} s of random and adversarial schemas through ${ENTRY_POINTS.length} entry points (seed ${SEED})`, async () => {
  const r = new Prng(SEED);
  const bad: string[] = [];
  const statuses = new Map<number, number>();
  const { value: sent, slowestS, answered } = await whileOthersAsk(s, async () => {
    const until = performance.now() + SECONDS * 1000;
    let n = 0;
    // two attackers at once: the model has two slots
    const attacker = async (rr: Prng) => {
      while (performance.now() < until && bad.length < 5) {
        const schema = fuzzSchema(rr);
        const entry = rr.pick(ENTRY_POINTS);
        n++;
        let answer: { status: number; code: string | null; message: string };
        try {
          answer = await errorOf(await post(s, entry.path, entry.body(schema), s.attacker, { signal: AbortSignal.timeout(30_000) }));
        } catch (e) {
          answer = { status: 0, code: null, message: String(e) };
        }
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
        const named = answer.status === 200 || (answer.status === 400 && answer.code !== null);
        if (!named) bad.push(`${entry.name}: ${answer.status} ${answer.code} ${answer.message} for ${JSON.stringify(schema).slice(0, 400)}`);
      }
    };
    await Promise.all([attacker(r.fork()), attacker(r.fork())]);
    return n;
  });
  console.log(`schema fuzz: ${sent} requests, statuses ${JSON.stringify(Object.fromEntries(statuses))}, other user answered ${answered} times, slowest ${slowestS.toFixed(2)} s`);
  expect(bad).toEqual([]);
  expect(s.alive()).toBe(true);
  expect(sent).toBeGreaterThan(20);
  expect(answered).toBeGreaterThan(0);
  expect(slowestS).toBeLessThan(8);
}, 180_000);
