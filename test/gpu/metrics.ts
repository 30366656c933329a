import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { isChatPresetName } from "../../models/presets";
import { tempDir } from "../helpers/app";
import { CLI, untilListening } from "../helpers/cli";
import { addRow, firstLine, fmt } from "./rows";

// Step 6 of the device check (test/gpu/device-check.sh): /metrics from our server, as an operator
// runs it (`appliance serve`, its own process), with a chat model offloaded to `device`: the layers
// on the GPU (appliance_model_gpu_layers of appliance_model_layers), the GPUs named
// (appliance_model_device_info) and the device's memory (appliance_model_device_memory_used_bytes /
// _total_bytes), after one request.
//   bun test/gpu/metrics.ts cuda bench-0.5b

/** The value of `name`'s sample for model "chat" (its other labels any), or undefined. */
function sample(text: string, name: string): { labels: string; value: number } | undefined {
  const m = new RegExp(`^${name}\\{([^}]*model="chat"[^}]*)\\} (\\S+)$`, "m").exec(text);
  return m ? { labels: m[1]!, value: Number(m[2]) } : undefined;
}
const label = (labels: string, k: string) => new RegExp(`${k}="([^"]*)"`).exec(labels)?.[1];

export async function checkMetrics(device: "cuda" | "vulkan", preset: string): Promise<void> {
  const check = "/metrics: device memory and layers";
  if (!isChatPresetName(preset)) throw new Error(`unknown chat model preset "${preset}"`);
  const model = await ensureChatModel(preset);
  const dir = tempDir("appliance-device-metrics-");
  const config = join(dir, "config.toml");
  writeFileSync(config, `[server]\nlog_level = "warn"\n[engines]\ndevice = "${device}"\nthreads = 2\n[rentals]\ndiscover = false\n` +
    `[[models]]\nid = "chat"\nname = "chat"\nkind = "chat"\nfiles = { model = "${model}" }\nmax_context = 1024\nslots = 1\nload = "start"\n`);
  const child = Bun.spawn([process.execPath, CLI, "-c", config, "-d", join(dir, "data"), "serve", "--port", "0"], { env: { ...process.env, HOME: dir }, stdout: "ignore", stderr: "pipe" });
  let stderr = "";
  try {
    const started = await untilListening(child.stderr as ReadableStream<Uint8Array>);
    stderr = started.banner;
    void (async () => {
      for await (const chunk of child.stderr as ReadableStream<Uint8Array>) stderr = (stderr + new TextDecoder().decode(chunk)).slice(-4000);
    })().catch(() => {});
    const headers = { authorization: `Bearer ${started.key}`, "content-type": "application/json" };
    const chat = await fetch(`${started.url}/v1/chat/completions`, { method: "POST", headers, body: JSON.stringify({ model: "chat", max_tokens: 8, messages: [{ role: "user", content: "Hello" }] }) });
    if (chat.status !== 200) throw new Error(`a chat request: ${chat.status} ${(await chat.text()).slice(0, 200)}`);
    const text = await (await fetch(`${started.url}/metrics`, { headers })).text();
    const info = sample(text, "appliance_model_device_info");
    const layers = sample(text, "appliance_model_layers")?.value;
    const gpuLayers = sample(text, "appliance_model_gpu_layers")?.value;
    const used = sample(text, "appliance_model_device_memory_used_bytes");
    const total = sample(text, "appliance_model_device_memory_total_bytes");
    const on = info ? label(info.labels, "device") : undefined;
    const MiB = 1024 * 1024;
    const ok = on === device && used !== undefined && total !== undefined && (gpuLayers ?? 0) > 0;
    addRow({
      check,
      device,
      result: ok ? "ok" : on && on !== device ? `fell back to ${on}` : "missing",
      figure: used && total ? `${fmt(used.value / MiB)} / ${fmt(total.value / MiB)} MiB used / total` : "no device memory samples",
      notes: `${preset}: ${gpuLayers ?? "?"}/${layers ?? "?"} layers on ${on ?? "?"}${info && label(info.labels, "gpus") ? ` (${label(info.labels, "gpus")})` : ""}`,
    });
  } catch (e) {
    addRow({ check, device, result: "failed", notes: `${firstLine(e)}${stderr ? `; server stderr: ${stderr.trim().split("\n").slice(-2).join(" ")}` : ""}` });
  } finally {
    child.kill("SIGTERM");
    if ((await Promise.race([child.exited, Bun.sleep(5000).then(() => "slow")])) === "slow") child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const [device, preset] = process.argv.slice(2);
  if (device !== "cuda" && device !== "vulkan") {
    console.error("usage: bun test/gpu/metrics.ts cuda|vulkan PRESET");
    process.exit(2);
  }
  await checkMetrics(device, preset ?? "bench-0.5b");
}
