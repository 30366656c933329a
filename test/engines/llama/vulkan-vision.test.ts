import { afterAll, beforeAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import sharp from "sharp";
import { ensureChatModel } from "../../../models/cache";
import { ensureProjector } from "../../../models/projector-cache";
import { tempDir } from "../../helpers/app";
import { serveCli } from "../../helpers/cli";
import { LLVMPIPE_ENV } from "../../helpers/vulkan";
import { lavapipeDescriptorsEnv } from "./lavapipe";

// Image input on the Vulkan backend (Mesa's llvmpipe), in a server process of its own as a user runs
// it: the vision model's layers and its projector on the device, image requests alone and beside a
// text request on the other slot, each in the state the one before left (a crash, or a heap it
// corrupted, shows here). GGML_VK_VISIBLE_DEVICES is set for the child only.
//
// The child also preloads lavapipe-descriptors.c, for a bug of the test device: Debian 12's
// lavapipe (Mesa 22.3) touches every buffer a bound descriptor set names, and ggml leaves buffers
// llama.cpp has freed in bindings a dispatch does not use; an image of a non-causal projector frees
// the compute buffers twice (see that file). Without it this test failed 5 runs out of 5, the
// server aborting with a corrupted heap at the first or second image request (projector on the
// device or on the CPU alike). A driver that leaves unused descriptors alone, as Vulkan allows,
// needs nothing of the kind.

let dir: string;
let server: Awaited<ReturnType<typeof serveCli>>;
let logs = "";

beforeAll(async () => {
  dir = tempDir("appliance-vk-vision-");
  const [model, mmproj] = await Promise.all([ensureChatModel("chat"), ensureProjector("chat-vision")]);
  writeFileSync(
    join(dir, "config.toml"),
    [
      "[engines]",
      'device = "vulkan"',
      "threads = 2",
      "[rentals]",
      "discover = false",
      "[[models]]",
      'id = "vision"',
      'name = "vision on vulkan"',
      'kind = "chat"',
      "vision = true",
      `files = { model = "${model}", mmproj = "${mmproj}" }`,
      "max_context = 2048",
      "slots = 2",
      'load = "start"',
    ].join("\n"),
  );
  server = await serveCli(dir, ["--port", "0"], {
    ...LLVMPIPE_ENV,
    ...lavapipeDescriptorsEnv(dir),
    XDG_RUNTIME_DIR: "/tmp",
    APPLIANCE_CONFIG: join(dir, "config.toml"),
  });
  // the JSON log lines, on stdout
  void (async () => {
    for await (const chunk of server.child.stdout as ReadableStream<Uint8Array>) logs += new TextDecoder().decode(chunk);
  })();
}, 240_000);

afterAll(async () => {
  server?.child.kill();
  await server?.child.exited;
  rmSync(dir, { recursive: true, force: true });
});

test("image requests on the Vulkan runtime: layers and projector on the device, alone and beside a text request", async () => {
  const textTokens = (await chat(textMessages("what is it?"), 2)).usage.prompt_tokens as number;
  for (let i = 0; i < 4; i++) {
    // odd ones share the context with a text request generating on the other slot
    const [image, beside] = await Promise.all([chat(await imageMessages(i), 2), i % 2 ? chat(textMessages(`tell me a story ${i}`), 24) : null]);
    // the image's positions are in the prompt: the chat-vision projector's 16 embeddings and more
    expect(image.usage.prompt_tokens).toBeGreaterThanOrEqual(textTokens + 16);
    if (beside) expect(beside.usage.completion_tokens).toBeGreaterThan(0);
  }

  // (the log is read from the child's stdout as it comes: by now it has the load lines)
  expect(logs).toMatch(/"msg":"chat engine device".*"device":"vulkan"/);
  expect(logs).toMatch(/"msg":"chat model loaded".*"device":"vulkan".*"gpu_layers":[1-9]/);
  expect(logs).toMatch(/"msg":"chat model projector loaded".*"device":"vulkan".*"backend":"Vulkan0"/);
  expect(logs).not.toMatch(/not stable|projector runs on the CPU/);
  expect(server.child.exitCode).toBeNull();
  const models = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${server.key}` } });
  expect(models.status).toBe(200);
}, 240_000);

const textMessages = (text: string) => [{ role: "user", content: text }];

async function imageMessages(i: number) {
  const png = await sharp({ create: { width: 32, height: 32, channels: 3, background: ["#ff0000", "#00ff00", "#0000ff", "#777777"][i]! } }).png().toBuffer();
  return [{ role: "user", content: [{ type: "text", text: "what is it?" }, { type: "image_url", image_url: { url: `data:image/png;base64,${png.toString("base64")}` } }] }];
}

async function chat(messages: unknown[], maxTokens: number): Promise<any> {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${server.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "vision", max_tokens: maxTokens, temperature: 0, messages }),
  });
  const body = (await res.json()) as any;
  expect({ status: res.status, body }).toMatchObject({ status: 200 });
  return body;
}
