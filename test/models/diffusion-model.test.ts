import { Value } from "@sinclair/typebox/value";
import { AutoTokenizer } from "@huggingface/transformers";
import { afterAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import * as ort from "onnxruntime-node";
import { ensureDiffusionModel } from "../../models/diffusion/cache";
import { DIFFUSION_DEMO_GENERATORS } from "../../models/diffusion/demo";
import { DIFFUSION_PRESETS, writeDiffusionModel } from "../../models/diffusion/generate";
import { ModelManifest } from "../../src/lib/manifest";
import { tempDir } from "../helpers/app";

const dirs: string[] = [];
const scratch = () => {
  const d = tempDir("appliance-diffusion-");
  dirs.push(d);
  return d;
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

function files(root: string): string[] {
  return readdirSync(root, { recursive: true, encoding: "utf8" })
    .filter((f) => statSync(join(root, f)).isFile())
    .sort();
}

const io = async (path: string) => {
  const s = await ort.InferenceSession.create(path, { executionProviders: ["cpu"], intraOpNumThreads: 1 });
  const shape = (m: ort.InferenceSession.ValueMetadata) => (m.isTensor ? `${m.type}[${m.shape.join(",")}]` : "?");
  return { inputs: Object.fromEntries(s.inputMetadata.map((m) => [m.name, shape(m)])), outputs: s.outputNames };
};

describe("the flow-matching set", () => {
  const dir = ensureDiffusionModel("diffusion-turbo");

  test("has the folder layout of a diffusers ONNX export with a transformer", () => {
    expect(files(dir)).toEqual([
      "model_index.json",
      "scheduler/scheduler_config.json",
      "text_encoder/config.json",
      "text_encoder/model.onnx",
      "tokenizer/special_tokens_map.json",
      "tokenizer/tokenizer.json",
      "tokenizer/tokenizer_config.json",
      "transformer/config.json",
      "transformer/model.onnx",
      "vae_decoder/config.json",
      "vae_decoder/model.onnx",
    ]);
    const index = JSON.parse(readFileSync(join(dir, "model_index.json"), "utf8"));
    expect(index.scheduler).toEqual(["diffusers", "FlowMatchEulerDiscreteScheduler"]);
    expect(JSON.parse(readFileSync(join(dir, "scheduler/scheduler_config.json"), "utf8"))).toMatchObject({ shift: 3, use_dynamic_shifting: false });
  });

  test("its graphs use the input and output names of optimum's exports", async () => {
    expect(await io(join(dir, "text_encoder/model.onnx"))).toEqual({
      inputs: { input_ids: "int64[batch_size,sequence_length]" },
      outputs: ["last_hidden_state", "pooler_output"],
    });
    expect(await io(join(dir, "transformer/model.onnx"))).toEqual({
      inputs: {
        hidden_states: "float32[batch_size,16,height,width]",
        timestep: "float32[step]",
        encoder_hidden_states: "float32[batch_size,sequence_length,32]",
        pooled_projections: "float32[batch_size,32]",
      },
      outputs: ["out_hidden_states"],
    });
    expect(await io(join(dir, "vae_decoder/model.onnx"))).toEqual({
      inputs: { latent_sample: "float32[batch_size,16,height_latent,width_latent]" },
      outputs: ["sample"],
    });
  });

  test("the VAE decoder turns latents into an image eight times larger", async () => {
    const s = await ort.InferenceSession.create(join(dir, "vae_decoder/model.onnx"), { intraOpNumThreads: 1 });
    const out = await s.run({ latent_sample: new ort.Tensor("float32", new Float32Array(16 * 4 * 6), [1, 16, 4, 6]) });
    expect(out.sample!.dims).toEqual([1, 3, 32, 48]);
  });

  test("its tokenizer.json is a real CLIP-style tokenizer that transformers.js loads", async () => {
    const tok = await AutoTokenizer.from_pretrained(join(dir, "tokenizer"), { local_files_only: true });
    const ids = Array.from(tok("A Photo of a CAT!", { padding: "max_length", max_length: 77, truncation: true }).input_ids.data, Number);
    const vocab = JSON.parse(readFileSync(join(dir, "tokenizer/tokenizer.json"), "utf8")).model.vocab;
    expect(ids).toHaveLength(77);
    expect(ids[0]).toBe(vocab["<|startoftext|>"]);
    expect(ids.slice(1, 3)).toEqual([vocab["a</w>"], vocab["photo</w>"]]); // lower-cased, whole words merged
    const eos = vocab["<|endoftext|>"];
    expect(ids.slice(ids.indexOf(eos))).toEqual(new Array(77 - ids.indexOf(eos)).fill(eos)); // padded with end-of-text
    expect(tok.decode(ids, { skip_special_tokens: true }).trim()).toBe("a photo of a cat!");
  });
});

describe("the SD-style set", () => {
  const dir = ensureDiffusionModel("diffusion-sd");

  test("has a unet with optimum's UNet names, an int64 scalar timestep and an Euler scheduler", async () => {
    expect(files(dir)).toContain("unet/model.onnx");
    expect(files(dir)).not.toContain("transformer/model.onnx");
    expect(await io(join(dir, "unet/model.onnx"))).toEqual({
      inputs: {
        sample: "float32[batch_size,4,height,width]",
        timestep: "int64[]",
        encoder_hidden_states: "float32[batch_size,sequence_length,32]",
      },
      outputs: ["out_sample"],
    });
    expect(JSON.parse(readFileSync(join(dir, "scheduler/scheduler_config.json"), "utf8"))).toMatchObject({
      _class_name: "EulerDiscreteScheduler",
      prediction_type: "epsilon",
    });
  });
});

describe("the set in onnxruntime/sd-turbo's layout", () => {
  const dir = ensureDiffusionModel("diffusion-sd-turbo-ort");
  const text = (rel: string) => readFileSync(join(dir, rel), "utf8");

  test("has exactly the files the sd-turbo catalogue entry pulls: CLIP's slow-tokenizer files, no tokenizer.json, no configs beside the graphs", () => {
    expect(files(dir)).toEqual([
      "model_index.json",
      "scheduler/scheduler_config.json",
      "text_encoder/model.onnx",
      "tokenizer/merges.txt",
      "tokenizer/special_tokens_map.json",
      "tokenizer/tokenizer_config.json",
      "tokenizer/vocab.json",
      "unet/model.onnx",
      "vae_decoder/model.onnx",
    ]);
  });

  test("model_index.json and the scheduler config are diffusers 0.24's for an OnnxStableDiffusionPipeline, at the sizes the hub records", () => {
    // onnxruntime/sd-turbo@6d0b4c1: model_index.json 595 bytes, scheduler_config.json 548 bytes
    expect([text("model_index.json").length, text("scheduler/scheduler_config.json").length]).toEqual([595, 548]);
    expect(JSON.parse(text("model_index.json"))).toMatchObject({
      _class_name: "OnnxStableDiffusionPipeline",
      scheduler: ["diffusers", "EulerDiscreteScheduler"],
      text_encoder: ["diffusers", "OnnxRuntimeModel"],
      unet: ["diffusers", "OnnxRuntimeModel"],
      vae_decoder: ["diffusers", "OnnxRuntimeModel"],
    });
    expect(JSON.parse(text("scheduler/scheduler_config.json"))).toMatchObject({ timestep_spacing: "trailing", prediction_type: "epsilon", timestep_type: "discrete" });
  });

  test("its tokenizer files are what transformers' CLIPTokenizer saves for SD 2.x: padded with \"!\", id 0", () => {
    const vocab = JSON.parse(text("tokenizer/vocab.json"));
    const config = JSON.parse(text("tokenizer/tokenizer_config.json"));
    expect(vocab["!"]).toBe(0);
    expect(config).toMatchObject({ tokenizer_class: "CLIPTokenizer", pad_token: "!", model_max_length: 77, bos_token: "<|startoftext|>", eos_token: "<|endoftext|>" });
    expect(config.added_tokens_decoder["0"]).toMatchObject({ content: "!", normalized: false, special: true });
    expect(JSON.parse(text("tokenizer/special_tokens_map.json")).pad_token).toMatchObject({ content: "!" });
    // the real files: 855 and 574 bytes; the tiny vocabulary's ids are 2 digits shorter twice
    expect([text("tokenizer/tokenizer_config.json").length, text("tokenizer/special_tokens_map.json").length]).toEqual([851, 574]);
    const [header, ...merges] = text("tokenizer/merges.txt").trimEnd().split("\n");
    expect(header).toBe("#version: 0.2");
    expect(merges.length).toBeGreaterThan(100);
    for (const m of merges) expect(vocab[m.replace(" ", "")]).toBeGreaterThan(511); // each merge's result follows the 512 byte symbols
    expect(text("tokenizer/vocab.json").split("\n")[1]).toBe('  "!": 0,'); // json.dumps(indent=2, sort_keys=True)
  });

  test("its graphs have Olive's names and element types: int32 input_ids, float16 everywhere else", async () => {
    expect(await io(join(dir, "text_encoder/model.onnx"))).toEqual({
      inputs: { input_ids: "int32[batch,sequence]" },
      outputs: ["last_hidden_state", "pooler_output"],
    });
    expect(await io(join(dir, "unet/model.onnx"))).toEqual({
      inputs: {
        sample: "float16[unet_sample_batch,unet_sample_channels,unet_sample_height,unet_sample_width]",
        timestep: "float16[unet_time_batch]",
        encoder_hidden_states: "float16[unet_hidden_batch,unet_hidden_sequence,32]",
      },
      outputs: ["out_sample"],
    });
    expect(await io(join(dir, "vae_decoder/model.onnx"))).toEqual({
      inputs: { latent_sample: "float16[batch,channels,height,width]" },
      outputs: ["sample"],
    });
    const s = await ort.InferenceSession.create(join(dir, "text_encoder/model.onnx"), { intraOpNumThreads: 1 });
    const out = await s.run({ input_ids: new ort.Tensor("int32", new Int32Array([0, 1, 2]), [1, 3]) });
    expect([out.last_hidden_state!.type, out.pooler_output!.type]).toEqual(["float16", "float16"]);
  });

  test("is generated byte-identically every time", () => {
    const [a, b] = [scratch(), scratch()];
    writeDiffusionModel(a, DIFFUSION_PRESETS["diffusion-sd-turbo-ort"]);
    writeDiffusionModel(b, DIFFUSION_PRESETS["diffusion-sd-turbo-ort"]);
    const digest = (root: string) => files(root).map((f) => `${f}:${createHash("sha256").update(readFileSync(join(root, f))).digest("hex")}`);
    expect(digest(a)).toEqual(digest(b));
  });
});

test("generation is deterministic: the same preset gives byte-identical files", () => {
  const [a, b] = [scratch(), scratch()];
  writeDiffusionModel(a, DIFFUSION_PRESETS["diffusion-turbo"]);
  writeDiffusionModel(b, DIFFUSION_PRESETS["diffusion-turbo"]);
  const digest = (root: string) => files(root).map((f) => `${relative(root, join(root, f))}:${createHash("sha256").update(readFileSync(join(root, f))).digest("hex")}`);
  expect(digest(a)).toEqual(digest(b));
});

test("the cache returns one folder per preset, named by generator version and spec hash", () => {
  const dir = scratch();
  const first = ensureDiffusionModel("diffusion-sd", dir);
  expect(ensureDiffusionModel("diffusion-sd", dir)).toBe(first);
  expect(relative(dir, first)).toMatch(/^diffusion-sd\.\d+\.[0-9a-f]{12}$/);
  expect(readdirSync(dir)).toHaveLength(1); // no temp folders left behind
});

test("the demo generator gives a valid image manifest pointing at the flow-matching set", async () => {
  const dir = scratch();
  const [gen] = DIFFUSION_DEMO_GENERATORS;
  const m = await gen!.ensure(dir);
  expect(Value.Check(ModelManifest, m)).toBe(true);
  expect(m).toMatchObject({ id: "demo-image", kind: "image", slots: 1 });
  expect(files(m.files.model!)).toContain("transformer/model.onnx");
});
