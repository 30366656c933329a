import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { cpSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import sharp from "sharp";
import { ensureDiffusionModel } from "../../../models/diffusion/cache";
import { denoiserGraph } from "../../../models/diffusion/denoiser";
import { DIFFUSION_PRESETS } from "../../../models/diffusion/generate";
import { ELEM, GraphBuilder } from "../../../models/onnx/graph";
import { DiffusionPipeline, GenerationStopped } from "../../../src/3-engines/diffusion/pipeline";
import type { ImageRequest } from "../../../src/3-engines/types";
import { tempDir } from "../../helpers/app";

// The bare pipeline in this thread, on both tiny sets (the engine runs the same code in workers).

const base: ImageRequest = { prompt: "a lighthouse at dusk", width: 256, height: 256, seed: 7, steps: 3 };
const same = (a: Uint8Array, b: Uint8Array) => Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;

for (const [preset, denoiser, scheduler] of [
  ["diffusion-turbo", "transformer", "FlowMatchEulerDiscreteScheduler"],
  ["diffusion-sd", "unet", "EulerDiscreteScheduler"],
] as const) {
  describe(preset, () => {
    let p: DiffusionPipeline;
    beforeAll(async () => {
      p = await DiffusionPipeline.load(ensureDiffusionModel(preset), { device: "cpu", threads: 1 });
    });
    afterAll(() => p.dispose());

    test(`reads its ${denoiser} and ${scheduler} from the folder`, () => {
      expect(p.info).toMatchObject({ denoiser, scheduler, scaleFactor: 8, maxPromptTokens: 77, device: "cpu" });
    });

    test("makes a PNG of the requested size", async () => {
      const png = await p.generate({ ...base, width: 320, height: 256 });
      const m = await sharp(png).metadata();
      expect([m.format, m.width, m.height, m.channels]).toEqual(["png", 320, 256, 3]);
      expect((await sharp(png).stats()).channels[0]!.stdev).toBeGreaterThan(1); // not a flat image
    });

    test("the same request gives the same bytes; seed, prompt and steps each change them", async () => {
      const a = await p.generate(base);
      expect(same(a, await p.generate(base))).toBe(true);
      expect(same(a, await p.generate({ ...base, seed: 8 }))).toBe(false);
      expect(same(a, await p.generate({ ...base, prompt: "a lighthouse at dawn" }))).toBe(false);
      expect(same(a, await p.generate({ ...base, steps: 4 }))).toBe(false);
    });

    test("runs one denoiser step per requested step and stops when asked", async () => {
      let polls = 0;
      await p.generate({ ...base, steps: 5 }, () => (polls++, false));
      expect(polls).toBe(6); // before each step, and before decoding
      let n = 0;
      await expect(p.generate({ ...base, steps: 5 }, () => ++n === 3)).rejects.toBeInstanceOf(GenerationStopped);
    });
  });
}

test("a prompt longer than the text encoder's window is truncated to it, as diffusers does", async () => {
  const p = await DiffusionPipeline.load(ensureDiffusionModel("diffusion-turbo"), { device: "cpu", threads: 1 });
  try {
    const long = "a very detailed painting of ".repeat(40);
    const png = await p.generate({ ...base, prompt: long });
    expect(same(png, await p.generate({ ...base, prompt: long + " and more words at the end" }))).toBe(true);
  } finally {
    await p.dispose();
  }
});

test("the bytes do not depend on the number of threads (so not on how many workers share the cores)", async () => {
  const pngs: Uint8Array[] = [];
  for (const threads of [1, 2]) {
    const p = await DiffusionPipeline.load(ensureDiffusionModel("diffusion-turbo"), { device: "cpu", threads });
    pngs.push(await p.generate({ ...base, width: 384 }).finally(() => p.dispose()));
  }
  expect(same(pngs[0]!, pngs[1]!)).toBe(true);
});

const dirs: string[] = [];
/** A scratch copy of a set, to break or change. */
const copy = (preset: "diffusion-turbo" | "diffusion-sd") => {
  const d = join(tempDir("appliance-diffusion-"), "model");
  dirs.push(join(d, ".."));
  cpSync(ensureDiffusionModel(preset), d, { recursive: true });
  return d;
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
const load = (dir: string) => DiffusionPipeline.load(dir, { device: "cpu", threads: 1 });

test("a transformer with float16 inputs and output, as GPU exports have, gives nearly the same image", async () => {
  const d = copy("diffusion-turbo");
  const spec = DIFFUSION_PRESETS["diffusion-turbo"];
  writeFileSync(join(d, "transformer/model.onnx"), denoiserGraph({ kind: "transformer", io: "float16", channels: spec.latentChannels, hidden: spec.textHidden, width: spec.denoiserWidth, seed: spec.seed }));
  const [half, full] = [await load(d), await load(ensureDiffusionModel("diffusion-turbo"))];
  try {
    const pixels = async (p: DiffusionPipeline) => (await sharp(await p.generate(base)).raw().toBuffer()) as Buffer;
    const [a, b] = [await pixels(half), await pixels(full)];
    expect(a.length).toBe(b.length);
    let diff = 0;
    for (let i = 0; i < a.length; i++) diff += Math.abs(a[i]! - b[i]!);
    expect(diff / a.length).toBeLessThan(2); // fp16 rounding only: under 2 of 255 on average
  } finally {
    await Promise.all([half.dispose(), full.dispose()]);
  }
});


describe("a folder that is not a usable export is refused at load with the reason", () => {

  test("no VAE decoder", async () => {
    const d = copy("diffusion-sd");
    rmSync(join(d, "vae_decoder/model.onnx"));
    await expect(load(d)).rejects.toThrow("vae_decoder/model.onnx is missing");
  });

  test("a scheduler this pipeline does not implement", async () => {
    const d = copy("diffusion-sd");
    writeFileSync(join(d, "model_index.json"), JSON.stringify({ scheduler: ["diffusers", "PNDMScheduler"] }));
    await expect(load(d)).rejects.toThrow(/scheduler "PNDMScheduler" is not supported/);
  });

  test("a UNet that wants SDXL's extra conditioning inputs", async () => {
    const d = copy("diffusion-sd");
    const g = new GraphBuilder("unet");
    g.input("sample", ELEM.float, ["b", 4, "h", "w"]);
    g.input("timestep", ELEM.int64, []);
    g.input("encoder_hidden_states", ELEM.float, ["b", "s", 32]);
    g.input("text_embeds", ELEM.float, ["b", 32]);
    g.node("Identity", ["sample"], {}, ["out_sample"]);
    g.output("out_sample", ELEM.float, ["b", 4, "h", "w"]);
    writeFileSync(join(d, "unet/model.onnx"), g.toBytes());
    await expect(load(d)).rejects.toThrow("unet/model.onnx wants inputs this pipeline does not provide: text_embeds");
  });

  test("not a folder at all", async () => {
    await expect(load("/nonexistent/model")).rejects.toThrow(/not a folder/);
  });
});
