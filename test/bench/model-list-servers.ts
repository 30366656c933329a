// Child process for the GET /v1/models benchmark (model-list.ts): `bare` serves the same JSON from
// a bare Bun.serve handler; `app` runs the real server (auth, limits, logging) on a fresh data dir.
// Prints "READY <url> <key>" on stderr once listening.
// The models are the generated tiny ones (real files: the server checks them at start), loaded on
// first use, which this bench never makes: it measures the edge, not an engine.
import { ensureChatModel } from "../../models/cache";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { validateConfig } from "../../src/lib/config";
import { startServer } from "../../src/main";
import { tempDir } from "../helpers/app";
import { manifestConfig } from "../helpers/models";

const mode = process.argv[2];
const dir = tempDir("appliance-bench-");
const m = manifestConfig();
const [chat, embed] = await Promise.all([ensureChatModel("chat"), ensureOnnxModel("embed")]);
const files = (kind: string) => (kind === "embedding" ? { model: embed } : { model: chat });
const models = m.models.map(({ vision: _vision, ...model }) => ({ ...model, files: files(model.kind), load: "first_use" }));
const config = validateConfig({ ...m, models, server: { data_dir: dir, port: 0 } });
config.models_dir = dir;

if (mode === "app") {
  let key = "";
  const s = await startServer(config, { banner: (l) => (key ||= /sk-apl-[0-9A-Za-z]{44}/.exec(l)?.[0] ?? "") });
  process.stderr.write(`READY ${s.url} ${key}\n`);
} else {
  // The same body the app answers, built once.
  const { createRegistry } = await import("../../src/3-engines/registry");
  const body = JSON.stringify({ object: "list", data: createRegistry(config.models, config.retired_models, { baseDir: dir }).list() });
  const s = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response(body, { headers: { "content-type": "application/json" } }) });
  process.stderr.write(`READY http://127.0.0.1:${s.port} none\n`);
}
process.on("SIGINT", () => process.exit(0));
