// Shared settings of the chat benchmark (issue "chat engine"): the ~65M-parameter Q8_0 qwen3
// model, 2 threads, 4 slots, short prompts (so prefill noise does not swamp a 5 ms budget),
// 64 generated tokens, thinking off.
export const BENCH = {
  preset: "bench-64m" as const,
  threads: Number(process.env.BENCH_THREADS ?? 2),
  slots: Number(process.env.BENCH_SLOTS ?? 4),
  contextSize: 1024,
  maxTokens: 64,
  rounds: Number(process.env.BENCH_ROUNDS ?? 15),
  /** A distinct prompt per stream and round, so no slot reuses another's cache. */
  prompt: (n: number) => `Request ${n}. Please write a short paragraph about the history of bridges and how they are built.`,
};
