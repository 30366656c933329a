import { afterAll, beforeAll, expect, test } from "bun:test";
import type OpenAI from "openai";
import type { TestApp } from "../../helpers/app";
import { uploadLines, waitForBatch } from "../../helpers/batches";
import { chatTestApp, forced } from "../../helpers/chat";

// Live requests beside running batch lines on one llama.cpp context (spec §8: live requests win).
// node-llama-cpp decodes all sequences of a context in one loop holding the context's lock, and a
// request taking a used slot must first erase that slot's cache under the same lock: without the
// decode gate of the time (now the native decode loop, src/3-engines/llama/decode-loop.ts) it waited until every batch line had finished.

let t: TestApp & { openai: (key: string) => OpenAI };
let client: OpenAI;
beforeAll(async () => {
  t = await chatTestApp({ slots: 3 }); // batch lines get 2 of them
  t.deps.batchWorker.start();
  client = t.openai(await t.key({ account: "gate", creditUsd: 5 }));
});
afterAll(() => t.close());

const LONG = Array.from({ length: 500 }, (_, i) => `w${i % 10}`).join(" ");

test("a live request taking a used slot gets its first token while batch lines keep generating", async () => {
  // Every slot holds a cached conversation first, so the live request below must erase one.
  await Promise.all(
    [1, 2, 3].map((i) => client.chat.completions.create({ model: "chat", max_tokens: 4, messages: [{ role: "user", content: `${forced("warm")} ${i}` }] })),
  );
  const lines = [0, 1].map((i) => ({
    custom_id: `long${i}`,
    url: "/v1/chat/completions",
    body: { model: "chat", max_tokens: 900, temperature: 0, chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: forced(LONG) + ` ${i}` }] },
  }));
  const batch = await client.batches.create({ input_file_id: await uploadLines(client, lines), endpoint: "/v1/chat/completions", completion_window: "24h" });
  const end = Date.now() + 30_000;
  while (t.deps.batchWorker.running() < 2 && Date.now() < end) await Bun.sleep(10);
  expect(t.deps.batchWorker.running()).toBe(2);
  await Bun.sleep(300); // both lines are past their prompts and generating

  const stream = await client.chat.completions.create({ model: "chat", max_tokens: 3, stream: true, messages: [{ role: "user", content: forced("first") + " live" }] });
  let runningAtFirstToken = -1;
  let completedAtFirstToken = -1;
  for await (const chunk of stream) {
    if (runningAtFirstToken < 0 && chunk.choices[0]?.delta?.content) {
      runningAtFirstToken = t.deps.batchWorker.running();
      completedAtFirstToken = (await client.batches.retrieve(batch.id)).request_counts!.completed;
    }
  }
  expect({ runningAtFirstToken, completedAtFirstToken }).toEqual({ runningAtFirstToken: 2, completedAtFirstToken: 0 });
  const done = await waitForBatch(client, batch.id);
  expect(done.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
}, 90_000);
