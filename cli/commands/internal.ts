import { Command } from "commander";
import { runCudaProbe } from "../../src/3-engines/llama/cuda-probe";
import { runGrammarWorker } from "../../src/3-engines/llama/grammar-worker";

/** Commands the server runs in a child process of its own (hidden from help). */
export function internalCommand(): Command {
  const internal = new Command("internal").description("used by the server itself");
  internal
    .command("cuda-probe")
    .description("offload a tiny model to CUDA and decode a few tokens; exit 0 when CUDA works")
    .action(async () => {
      process.exitCode = await runCudaProbe();
    });
  internal
    .command("grammar-worker")
    .description("compile JSON Schemas into grammars for the server, one JSON message a line on stdin and stdout")
    .action(async () => {
      process.exitCode = await runGrammarWorker();
    });
  return internal;
}
