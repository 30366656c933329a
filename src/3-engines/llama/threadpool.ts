import type { LlamaContext, LlamaModel } from "node-llama-cpp";
import { llamaAddon } from "./native/addon-path";
import { nativeContext, nativeModel } from "./native/handles";

// A persistent CPU threadpool for a chat context, through the appliance's llama addon
// (native/threadpool.cpp). Without it, node-llama-cpp's prebuilt CPU backend starts and joins its
// worker threads on every decode step (issue "chat throughput": on 2 cores a one-token step took
// 8 ms or 23 ms by turns; with the pool, 7.5-9 ms every time).

/**
 * How long idle workers poll for the next step before they sleep (ggml's 0-100 scale: 10 is 1.3M
 * pause instructions, ~70 ms on an Intel core, less on AMD). Long enough to bridge the gap between
 * decode steps (the JavaScript thread's ~0.3-1.5 ms of sampling, streaming and queueing), so a step
 * starts without waking its workers; short enough that an idle server stops spinning soon after
 * its last step. With 0 (sleep at once), 8 streams on the dev box prefilled ~7% slower than
 * llama-server, which polls at 50 (its default); at 50 level, at 10 1.02× at 8 streams (paired
 * runs, issue "chat throughput"). On 2 cores with 2 threads only the pool's one worker polls: the
 * thread that ran the step is not in the pool.
 */
export const THREADPOOL_POLL = 10;

export interface Threadpool {
  /** Detaches the pool from its context and frees it: before the context is disposed. */
  detach(): void;
}

interface Addon {
  attachThreadpool(model: unknown, context: unknown, threads: number, poll: number): Threadpool;
}

/** Attaches a pool of `threads` to `context`, or says why it could not. */
export function attachThreadpool(model: LlamaModel, context: LlamaContext, threads: number): { pool: Threadpool } | { reason: string } {
  try {
    const addon = llamaAddon<Partial<Addon>>();
    if (!addon) return { reason: "the llama addon is not built (./install.sh builds it)" };
    if (typeof addon.attachThreadpool !== "function") return { reason: "the llama addon has no attachThreadpool (an older build: run ./install.sh)" };
    return { pool: addon.attachThreadpool(nativeModel(model), nativeContext(context), threads, THREADPOOL_POLL) };
  } catch (e) {
    return { reason: (e as Error).message };
  }
}
