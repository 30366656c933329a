import "../onnx-telemetry"; // before ONNX Runtime starts: no telemetry, no mat-debug log
import { env, LogLevel } from "@huggingface/transformers";
import { DiffusionPipeline, GenerationStopped } from "./pipeline";
import type { FromWorker, ToWorker } from "./worker-protocol";

// The thread of one image worker. ONNX Runtime's Node binding runs a session synchronously on the
// calling thread, so a denoiser step on the server's thread would stall every other request for
// its duration (seconds per step for a 6B model on CPU); each image worker therefore owns a thread
// with its own pipeline. Messages are handled one at a time, in order.

declare const self: {
  onmessage: ((e: MessageEvent<ToWorker>) => void) | null;
  postMessage(message: FromWorker, transfer?: Transferable[]): void;
};

env.logLevel = LogLevel.ERROR; // this thread's own transformers.js instance: keep its console quiet

let pipeline: DiffusionPipeline | null = null;
let stopFlag: Int32Array<ArrayBufferLike> = new Int32Array(1);
let chain = Promise.resolve();

self.onmessage = (e) => {
  chain = chain.then(() => handle(e.data));
};

async function handle(msg: ToWorker): Promise<void> {
  switch (msg.type) {
    case "load":
      try {
        stopFlag = new Int32Array(msg.stop);
        pipeline = await DiffusionPipeline.load(msg.dir, {
          device: msg.device,
          threads: msg.threads,
          onFallback: (error) => self.postMessage({ type: "fallback", error }),
        });
        self.postMessage({ type: "loaded", info: pipeline.info });
      } catch (err) {
        self.postMessage({ type: "load_failed", message: (err as Error).message });
      }
      return;
    case "generate": {
      const { id } = msg;
      try {
        if (!pipeline) throw new Error("the pipeline is not loaded");
        const png = (await pipeline.generate(msg.req, () => Atomics.load(stopFlag, 0) === id)).slice();
        self.postMessage({ type: "done", id, png }, [png.buffer]);
      } catch (err) {
        self.postMessage({ type: "failed", id, stopped: err instanceof GenerationStopped, message: (err as Error).message });
      }
      return;
    }
    case "close":
      await pipeline?.dispose();
      pipeline = null;
      self.postMessage({ type: "closed" });
  }
}
