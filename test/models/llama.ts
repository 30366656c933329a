// Shared test setup for the model generator tests: one CPU llama.cpp instance with explicit threads
// (the default thread count is very slow on small machines), and a temp folder per test file.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, type Llama } from "node-llama-cpp";

export const THREADS = 2;

let llama: Promise<Llama> | undefined;

export function testLlama(): Promise<Llama> {
  return (llama ??= getLlama({ gpu: false, build: "never", maxThreads: THREADS }));
}

export function tempFolder(prefix: string): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
