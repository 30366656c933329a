import { Command } from "commander";
import { formatMicros, priceFor, usdToMicros } from "../../src/2-services/billing/pricing";
import { loadConfig } from "../../src/lib/config";
import { checkModelFiles } from "../../src/3-engines/registry";
import { globals } from "../context";
import { emit, fail } from "../output";

export function configCommand(): Command {
  const cmd = new Command("config").description("inspect the configuration");
  cmd
    .command("check")
    .description("validate the config (file, environment and flags) and the model files it names")
    .option("--json", "print the effective configuration as JSON")
    .action((opts: { json?: boolean }, c: Command) => {
      try {
        const g = globals(c);
        const { config, file } = loadConfig({ file: g.config, flags: { dataDir: g.dataDir } });
        // a model file whose header does not hold together would fail its load: the check fails too
        const corrupt = checkModelFiles(config.models, config.models_dir);
        if (corrupt.length) throw new Error(corrupt.map((p) => `${p.field} (model "${p.id}"): ${p.error.message}`).join("\n"));
        emit(opts.json, { file, config }, ({ file, config }) =>
          [
            `config ok (${file ?? "built-in defaults, no file"})`,
            `  listen:   ${config.server.host}:${config.server.port}`,
            `  data dir: ${config.server.data_dir}`,
            `  models:   ${config.models.length ? "" : "(none)"}`,
            ...config.models.map((m) => {
              const p = priceFor(m, config.prices);
              const price =
                m.kind === "image"
                  ? `${formatMicros(p.perImage)}/image`
                  : `${formatMicros(p.inputPerM)}/M in` + (p.outputPerM ? `, ${formatMicros(p.outputPerM)}/M out` : "");
              return `    ${m.id} (${m.kind}, ${m.max_context} ctx, ${m.slots} slots${m.vision ? ", vision" : ""}) ${price}`;
            }),
            `  rental nodes: ${config.rental_nodes.length}`,
            `  free key: ${config.limits.free_trial_tokens} trial tokens, ${config.limits.free_rpm} rpm`,
            `  batch price: ${Math.round(config.prices.batch_discount * 100)}% of live; image ${formatMicros(usdToMicros(config.prices.image_per_image))}`,
          ].join("\n"),
        );
      } catch (e) {
        fail(e);
      }
    });
  return cmd;
}
