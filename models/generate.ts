#!/usr/bin/env bun
// Command line: bun models/generate.ts <preset> <out.gguf>
// Writes a random-weight qwen3 chat model for one of the named presets.

import { renameSync } from "node:fs";
import { resolve } from "node:path";
import { vocabFor, writeChatModel } from "./generate-chat";
import { CHAT_PRESET_NAMES, countParameters, getChatPreset, isChatPresetName } from "./presets";

function usage(): string {
  const lines = CHAT_PRESET_NAMES.map((name) => {
    const spec = getChatPreset(name);
    const params = countParameters(spec, vocabFor(spec).tokens.length);
    return `  ${name.padEnd(12)} ${(params / 1e6).toFixed(1).padStart(7)}M params, ${spec.matrixType}, context ${spec.contextLength}`;
  });
  return ["usage: bun models/generate.ts <preset> <out.gguf>", "", "presets:", ...lines].join("\n");
}

async function main(argv: string[]): Promise<number> {
  const [preset, out] = argv;
  if (preset === "-h" || preset === "--help") {
    console.log(usage());
    return 0;
  }
  if (!preset || !out || argv.length !== 2) {
    console.error(usage());
    return 2;
  }
  if (!isChatPresetName(preset)) {
    console.error(`unknown preset "${preset}"\n\n${usage()}`);
    return 2;
  }
  const path = resolve(out);
  const temp = `${path}.partial`;
  const started = performance.now();
  const info = await writeChatModel(temp, getChatPreset(preset));
  renameSync(temp, path);
  const seconds = (performance.now() - started) / 1000;
  console.log(
    `${preset}: wrote ${path} (${(info.bytes / 2 ** 20).toFixed(1)} MiB, ${info.parameters} parameters, ` +
      `vocab ${info.vocabSize}) in ${seconds.toFixed(1)} s`,
  );
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
