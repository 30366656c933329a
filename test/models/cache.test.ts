import { afterAll, describe, expect, test } from "bun:test";
import { readdirSync, statSync } from "node:fs";
import { isAbsolute, join, resolve } from "node:path";
import { LlamaChat, readGgufFileInfo } from "node-llama-cpp";
import { cachedModelFileName, defaultModelCacheDir, ensureChatModel } from "../../models/cache";
import { GENERATOR_VERSION, vocabFor } from "../../models/generate-chat";
import { CHAT_PRESETS, countParameters } from "../../models/presets";
import { THREADS, tempFolder, testLlama } from "./llama";

const tmp = tempFolder("model-cache-");
afterAll(tmp.remove);

const CACHE_MODULE = resolve(import.meta.dir, "../../models/cache.ts");

describe("the shared model cache", () => {
  test("the default folder is <repo>/.cache/models unless APPLIANCE_MODEL_CACHE says otherwise", () => {
    const saved = process.env.APPLIANCE_MODEL_CACHE;
    try {
      delete process.env.APPLIANCE_MODEL_CACHE;
      expect(defaultModelCacheDir()).toBe(resolve(import.meta.dir, "../../.cache/models"));
      process.env.APPLIANCE_MODEL_CACHE = tmp.dir;
      expect(defaultModelCacheDir()).toBe(tmp.dir);
    } finally {
      if (saved === undefined) delete process.env.APPLIANCE_MODEL_CACHE;
      else process.env.APPLIANCE_MODEL_CACHE = saved;
    }
  });

  test("ensureChatModel generates once into the folder and returns the same absolute path afterwards", async () => {
    const dir = join(tmp.dir, "once");
    const [first, concurrent] = await Promise.all([ensureChatModel("chat", dir), ensureChatModel("chat", dir)]);
    expect(isAbsolute(first)).toBe(true);
    expect(concurrent).toBe(first);
    expect(first).toBe(join(dir, cachedModelFileName("chat", CHAT_PRESETS.chat)));
    expect(first).toContain(GENERATOR_VERSION);
    const mtime = statSync(first).mtimeMs;
    expect(await ensureChatModel("chat", dir)).toBe(first);
    expect(statSync(first).mtimeMs).toBe(mtime);
    expect(readdirSync(dir)).toEqual([cachedModelFileName("chat", CHAT_PRESETS.chat)]);
  });

  test("presets with different specs get different file names", () => {
    expect(cachedModelFileName("x", CHAT_PRESETS.chat)).not.toBe(cachedModelFileName("x", { ...CHAT_PRESETS.chat, seed: 3 }));
  });

  test("concurrent processes sharing the folder all get the complete file and leave no temp files", async () => {
    const dir = join(tmp.dir, "shared");
    const script = `const { ensureChatModel } = await import(${JSON.stringify(CACHE_MODULE)}); console.log(await ensureChatModel("small-chat", ${JSON.stringify(dir)}));`;
    const runs = [0, 1, 2].map(() => Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "inherit" }));
    const paths = await Promise.all(runs.map(async (p) => ((await p.exited) === 0 ? (await new Response(p.stdout).text()).trim() : "failed")));
    expect(new Set(paths).size).toBe(1);
    expect(readdirSync(dir)).toEqual([cachedModelFileName("small-chat", CHAT_PRESETS["small-chat"])]);
    const info = await readGgufFileInfo(paths[0]!, { logWarnings: false });
    expect(info.metadata.general.name).toBe(CHAT_PRESETS["small-chat"].name);
  });
});

describe("benchmark presets", () => {
  const paramsOf = (info: Awaited<ReturnType<typeof readGgufFileInfo>>) =>
    info.tensorInfo!.reduce((sum, t) => sum + t.dimensions.reduce<number>((p, d) => p * Number(d), 1), 0);

  test(
    "bench-64m has about 64M Q8_0 parameters, a 4096 context and generates varied tokens",
    async () => {
      const path = await ensureChatModel("bench-64m");
      const info = await readGgufFileInfo(path, { logWarnings: false });
      const params = paramsOf(info);
      expect(params).toBeGreaterThan(60e6);
      expect(params).toBeLessThan(70e6);
      expect(info.metadata.general.file_type).toBe(7 as never); // MOSTLY_Q8_0
      expect(info.architectureMetadata.context_length).toBe(4096);
      const model = await (await testLlama()).loadModel({ modelPath: path });
      const context = await model.createContext({ contextSize: 256, threads: THREADS });
      try {
        const tokens: number[] = [];
        await new LlamaChat({ contextSequence: context.getSequence() }).generateResponse(
          [{ type: "user", text: "Tell me a story." }],
          { maxTokens: 12, temperature: 0, onToken: (t) => tokens.push(...t) },
        );
        expect(new Set(tokens).size).toBeGreaterThan(3);
      } finally {
        await context.dispose();
        await model.dispose();
      }
    },
    60_000,
  );

  // Generating it writes 513 MiB (~17 s): the benchmark does that; here the spec's count is checked,
  // using the same counting the bench-64m file above was checked against.
  test("bench-0.5b is specified at about 0.5B Q8_0 parameters", () => {
    const spec = CHAT_PRESETS["bench-0.5b"];
    const params = countParameters(spec, vocabFor(spec).tokens.length);
    expect(params).toBeGreaterThan(0.45e9);
    expect(params).toBeLessThan(0.55e9);
    expect(spec.matrixType).toBe("q8_0");
  });

  test("the parameter count of a spec is the one of the file written from it", async () => {
    const path = await ensureChatModel("bench-64m");
    const spec = CHAT_PRESETS["bench-64m"];
    expect(paramsOf(await readGgufFileInfo(path, { logWarnings: false }))).toBe(countParameters(spec, vocabFor(spec).tokens.length));
  });
});
