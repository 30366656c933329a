import { Value } from "@sinclair/typebox/value";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { isAbsolute, join, relative } from "node:path";
import { isDownload, type CatalogueEntry } from "../../../models/catalogue";
import { describeErrors } from "../../lib/config";
import { ModelManifest, type ModelKind } from "../../lib/manifest";
import { readModelFolder } from "../../3-engines/diffusion/model-folder";
import { isZImageBundle, readZImageBundle } from "../../3-engines/diffusion/z-image-bundle";
import { isRerankerConfig, readClassifierFolder, readEmbedderFolder, readRerankerFolder } from "../../3-engines/transformers/model-folder";
import { alive } from "../../4-store/lock";
import { HF_DEFAULT_CONTEXT, quantOf } from "./hf";
import { checkGguf, GgufFormatError } from "../../3-engines/gguf-check";

// `appliance models add ID`: the [[models]] entry of a pulled model, made from its folder's own
// files, and written into the config file without disturbing what is there.
//   GGUF         → chat; max_context the GGUF's trained context_length, at most HF_DEFAULT_CONTEXT
//                  (as `pull hf:…`); an mmproj*.gguf beside it makes it a vision model
//   config.json  → reranker when it is a one-logit cross-encoder (one label, no architecture but
//                  *ForSequenceClassification: bge-reranker, ms-marco cross-encoders); else classifier
//                  when it is a sequence classifier (architectures *ForSequenceClassification, or
//                  id2label with real names); else embedding; max_context from the folder
//                  (model-folder.ts: max_position_embeddings, model_max_length, max_seq_length).
//                  A two-label cross-encoder is not guessed: declare kind = "reranker" yourself
//   model_index.json (diffusers) or onnx/transformer_model*.onnx (the Z-Image bundle) → image
// A chat model gets context = "auto" (the planner fits the context per slot at load, up to max_context).
// A catalogue id adds its entry's name, its (curated) max_context — never above what the file was
// trained for — and its `manifest` extras (slots, price, gpu_layers, device, …).

export class AddError extends Error {
  override name = "AddError";
}

/** What a model folder holds, by its own files: role → path inside the folder ("." = the folder). */
export interface FolderModel {
  kind: ModelKind;
  files: Record<string, string>;
  max_context: number;
  vision: boolean;
  /** The name the files give the model, when they give one. */
  name?: string;
  /** The context a GGUF was trained for, when its header says. */
  trained?: number;
}

/** Worker slots a new entry gets: two for a chat model (an agent and one more client), else one. */
export const DEFAULT_SLOTS: Record<ModelKind, number> = { chat: 2, embedding: 1, classifier: 1, reranker: 1, image: 1 };
/** The prompt window a diffusers-layout image model gets when its tokenizer does not say (CLIP's). */
const CLIP_CONTEXT = 77;
/** Z-Image-Turbo's prompt limit (its pipeline's max_sequence_length). */

const SPLIT = /-(\d{5})-of-(\d{5})\.gguf$/i;

/** Everything under `dir`, as paths relative to it. */
function walk(dir: string, under = ""): string[] {
  return readdirSync(join(dir, under), { withFileTypes: true }).flatMap((d) => {
    const rel = under ? `${under}/${d.name}` : d.name;
    return d.isDirectory() ? walk(dir, rel) : [rel];
  });
}

/** Refuses a folder a pull has not finished: a live pull's lock, a `.part`, an empty file. */
function checkComplete(dir: string, id: string, files: string[]): void {
  if (files.includes(".pull.lock")) {
    const pid = Number(readFileSync(join(dir, ".pull.lock"), "utf8").trim());
    if (Number.isInteger(pid) && pid > 0 && alive(pid)) throw new AddError(`${dir}: a pull (process ${pid}) is still writing into it; wait for it to finish`);
  }
  const part = files.find((f) => f.endsWith(".part"));
  if (part) throw new AddError(`${dir}: ${part} is an unfinished download; run \`appliance models pull ${id}\` again to finish it`);
  const empty = files.find((f) => f !== ".pull.lock" && statSync(join(dir, f)).size === 0);
  if (empty) throw new AddError(`${dir}: ${empty} is empty (an interrupted copy?)`);
}

/** The kind, files and window of the model in `dir`, read from its files; an AddError when they say nothing clear. */
export async function inspectModelFolder(dir: string, id = "ID"): Promise<FolderModel> {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new AddError(`${dir}: no such folder; pull the model first (appliance models pull ${id})`);
  const files = walk(dir);
  checkComplete(dir, id, files);
  const ggufs = files.filter((f) => f.toLowerCase().endsWith(".gguf"));
  if (ggufs.length) return inspectGguf(dir, ggufs);
  if (existsSync(join(dir, "model_index.json")) || files.some((f) => /^onnx\/transformer_model[^/]*\.onnx$/.test(f))) return inspectImage(dir);
  if (existsSync(join(dir, "config.json"))) return inspectEncoder(dir);
  throw new AddError(`${dir}: cannot tell what model this is: no .gguf file (chat), no config.json (embedding, classifier or reranker), no model_index.json or onnx/transformer_model*.onnx (image)`);
}

async function inspectGguf(dir: string, ggufs: string[]): Promise<FolderModel> {
  const projectors = ggufs.filter((f) => /mmproj/i.test(f.slice(f.lastIndexOf("/") + 1)));
  const weights = ggufs.filter((f) => !projectors.includes(f));
  // the parts of a split GGUF count as one model, named by their first part
  const groups = new Map<string, string[]>();
  for (const f of weights) groups.set(f.replace(SPLIT, ".gguf"), [...(groups.get(f.replace(SPLIT, ".gguf")) ?? []), f]);
  if (groups.size === 0) throw new AddError(`${dir}: only a projector (${projectors.join(", ")}), no model GGUF`);
  if (groups.size > 1) throw new AddError(`${dir}: ${groups.size} model GGUFs (${[...groups.keys()].join(", ")}); keep one in the folder`);
  const [key, parts] = [...groups.entries()][0]!;
  parts.sort();
  const split = SPLIT.exec(parts[0]!);
  if (split && parts.length !== Number(split[2])) throw new AddError(`${dir}: ${key} is split in ${Number(split[2])} parts but ${parts.length} are there`);
  const quant = quantOf(key);
  const rank = (p: string) => (quant && quantOf(p) === quant ? 0 : quantOf(p) === "F16" ? 1 : quantOf(p) === "BF16" ? 2 : 3);
  const mmproj = [...projectors].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b))[0];
  const facts = await ggufFacts(join(dir, parts[0]!));
  for (const p of [...parts.slice(1), ...(mmproj ? [mmproj] : [])]) await ggufFacts(join(dir, p)); // readable, not only present
  const roles: Record<string, string> = {};
  parts.forEach((p, i) => (roles[i === 0 ? "model" : `part${i + 1}`] = p));
  if (mmproj) roles.mmproj = mmproj;
  return {
    kind: "chat",
    files: roles,
    max_context: Math.min(facts.context ?? HF_DEFAULT_CONTEXT, HF_DEFAULT_CONTEXT),
    vision: mmproj !== undefined,
    ...(facts.name ? { name: facts.name } : {}),
    ...(facts.context !== null ? { trained: facts.context } : {}),
  };
}

/** The GGUF header's name and trained context (`<arch>.context_length`); an AddError when it is no GGUF. */
async function ggufFacts(path: string): Promise<{ name?: string; context: number | null }> {
  const { readGgufFileInfo } = await import("node-llama-cpp"); // only here: the CLI starts without it
  let info;
  try {
    // the header checked first: node-llama-cpp's reader loops on a corrupt file's counts
    await checkGguf(path);
    info = await readGgufFileInfo(path, { readTensorInfo: false });
  } catch (e) {
    if (e instanceof GgufFormatError) throw new AddError(e.message);
    throw new AddError(`${path}: not a readable GGUF file (${(e as Error).message})`);
  }
  const meta = info.metadata as Record<string, Record<string, unknown> | undefined>;
  const arch = info.metadata.general?.architecture;
  const n = arch ? meta[arch]?.context_length : undefined;
  const name = info.metadata.general?.name;
  return { context: typeof n === "number" && Number.isInteger(n) && n > 0 ? n : null, ...(typeof name === "string" && name.trim() ? { name: name.trim() } : {}) };
}

function inspectImage(dir: string): FolderModel {
  // The engine's own layout readers decide: what they refuse at load is refused here.
  try {
    if (isZImageBundle(dir)) return { kind: "image", files: { model: "." }, max_context: readZImageBundle(dir).maxPromptTokens, vision: false };
    readModelFolder(dir);
  } catch (e) {
    throw new AddError((e as Error).message);
  }
  let context = CLIP_CONTEXT;
  try {
    const n = JSON.parse(readFileSync(join(dir, "tokenizer/tokenizer_config.json"), "utf8")).model_max_length;
    if (Number.isInteger(n) && n > 0 && n < 1e9) context = n;
  } catch {} // no tokenizer_config.json: CLIP's window
  return { kind: "image", files: { model: "." }, max_context: context, vision: false };
}

/** A sequence classifier by its config: the architecture says so, or id2label gives real names (not LABEL_0…). */
function isClassifier(config: { architectures?: unknown; id2label?: unknown }): boolean {
  if (Array.isArray(config.architectures) && config.architectures.some((a) => typeof a === "string" && a.endsWith("ForSequenceClassification"))) return true;
  const labels = config.id2label && typeof config.id2label === "object" ? Object.values(config.id2label) : [];
  return labels.length > 0 && labels.some((l) => !/^LABEL_\d+$/.test(String(l)));
}

function inspectEncoder(dir: string): FolderModel {
  let config: Record<string, unknown>;
  try {
    config = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
  } catch (e) {
    throw new AddError(`${dir}/config.json: ${(e as Error).message}`);
  }
  const kind = isRerankerConfig(config) ? "reranker" : isClassifier(config) ? "classifier" : "embedding";
  const read = { reranker: readRerankerFolder, classifier: readClassifierFolder, embedding: readEmbedderFolder }[kind];
  try {
    // The engines' own reading of the folder: what they would refuse at load is refused now.
    const info = read(dir);
    return { kind, files: { model: "." }, max_context: info.maxTokens, vision: false };
  } catch (e) {
    throw new AddError(`${(e as Error).message} (read as ${{ reranker: "a reranker", classifier: "a classifier", embedding: "an embedding model" }[kind]})`);
  }
}

/** Where a catalogue entry's files are in its folder, with their size where the entry records it. */
function catalogueFiles(e: CatalogueEntry): { path: string; bytes: number | null }[] {
  if (isDownload(e)) return Object.values(e.files).map((f) => ({ path: f.path, bytes: f.bytes }));
  if (e.source === "hf")
    return Object.values(e.hf.files as Record<string, string | { path: string; bytes?: number }>).map((f) => (typeof f === "string" ? { path: f, bytes: null } : { path: f.path, bytes: f.bytes ?? null }));
  return [];
}

/**
 * The [[models]] manifest for the model in `dir` served as `id`, file paths relative to
 * `modelsDir` (the config's models_dir) when the folder is under it, else absolute. Validated
 * against the config's schema, defaults filled.
 */
export async function manifestForFolder(o: { id: string; dir: string; modelsDir: string; entry?: CatalogueEntry }): Promise<ModelManifest> {
  const { id, dir, entry } = o;
  if (entry) {
    const expected = catalogueFiles(entry);
    const missing = expected.filter((f) => !existsSync(join(dir, f.path))).map((f) => f.path);
    if (missing.length) throw new AddError(`${dir}: incomplete: ${missing.join(", ")} missing; run \`appliance models pull ${id}\``);
    const wrong = expected.find((f) => f.bytes !== null && statSync(join(dir, f.path)).size !== f.bytes);
    if (wrong) throw new AddError(`${dir}: ${wrong.path} is not the catalogue's size (${wrong.bytes} bytes); run \`appliance models pull ${id}\` again`);
  }
  const found = await inspectModelFolder(dir, id);
  if (entry && entry.kind !== found.kind) throw new AddError(`${dir}: its files are ${article(found.kind)} ${found.kind} model, but the catalogue's "${id}" is ${article(entry.kind)} ${entry.kind} model`);
  const extras = entry && "manifest" in entry ? (entry.manifest ?? {}) : {};
  const rel = relative(o.modelsDir, dir);
  const folder = rel && !rel.startsWith("..") && !isAbsolute(rel) ? rel : dir;
  const roles = extras.files ?? found.files;
  const files = Object.fromEntries(Object.entries(roles).map(([role, p]) => [role, p === "." ? folder : join(folder, p)]));
  const raw = {
    ...extras,
    id,
    name: entry?.name ?? found.name ?? id,
    kind: found.kind,
    files,
    max_context: entry ? catalogueContext(entry.max_context, found) : found.max_context,
    // A chat model's context per slot is chosen at load to fit the memory there is (issue 28).
    ...(found.kind === "chat" ? { context: extras.context ?? "auto" } : {}),
    vision: found.vision,
    slots: extras.slots ?? DEFAULT_SLOTS[found.kind],
  };
  const m = Value.Default(ModelManifest, Value.Clone(raw));
  const problems = describeErrors(ModelManifest, m);
  if (problems.length) throw new AddError(`the entry for "${id}" is not valid: ${problems.join("; ")}`);
  return m as ModelManifest;
}

/** A catalogue entry's window, chosen for the model, but never above what its files allow. */
function catalogueContext(chosen: number, found: FolderModel): number {
  if (found.kind === "chat") return Math.min(chosen, found.trained ?? chosen);
  if (found.kind === "image") return chosen;
  return Math.min(chosen, found.max_context);
}

const article = (kind: ModelKind) => (kind === "embedding" || kind === "image" ? "an" : "a");

/** A TOML value: strings as JSON strings (valid TOML basic strings), tables inline. */
function tomlValue(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (v && typeof v === "object")
    return `{ ${Object.entries(v)
      .filter(([, x]) => x !== undefined)
      .map(([k, x]) => `${/^[A-Za-z0-9_-]+$/.test(k) ? k : JSON.stringify(k)} = ${tomlValue(x)}`)
      .join(", ")} }`;
  throw new Error(`no TOML form for ${String(v)}`);
}

/** The [[models]] block of a manifest, fields in the schema's order. */
export function manifestToml(m: ModelManifest): string {
  const keys = Object.keys(ModelManifest.properties) as (keyof ModelManifest)[];
  return ["[[models]]", ...keys.filter((k) => m[k] !== undefined).map((k) => `${k} = ${tomlValue(m[k])}`)].join("\n");
}

const MODELS_HEADER = /^\s*\[\[\s*models\s*\]\]\s*(#.*)?$/;
const ANY_HEADER = /^\s*\[/;
// [models.price] and the like belong to the [[models]] block above them
const MODELS_SUBTABLE = /^\s*\[\s*models\s*\./;

/** The [[models]] blocks of a config's text: line ranges [start, end) without trailing blank and comment lines. */
function modelBlocks(lines: string[]): { start: number; end: number }[] {
  const blocks: { start: number; end: number }[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!MODELS_HEADER.test(lines[i]!)) continue;
    let end = i + 1;
    while (end < lines.length && (!ANY_HEADER.test(lines[end]!) || MODELS_SUBTABLE.test(lines[end]!))) end++;
    while (end > i + 1 && /^\s*(#.*)?$/.test(lines[end - 1]!)) end--;
    blocks.push({ start: i, end });
  }
  return blocks;
}

/** The first [[models]] entry of a piece of TOML. */
function firstModel(text: string, what: string): Record<string, unknown> | undefined {
  const models = parseToml(text, what).models;
  return Array.isArray(models) ? (models[0] as Record<string, unknown>) : undefined;
}

function parseToml(text: string, what: string): Record<string, unknown> {
  try {
    return Bun.TOML.parse(text) as Record<string, unknown>;
  } catch (e) {
    throw new AddError(`${what}: ${(e as Error).message}`);
  }
}

/**
 * The config text with `m`'s [[models]] block appended, or put in place of the block with the same
 * id (`replace`). Everything else — comments, other tables, their order — stays as it was; the
 * result is parsed back and must hold exactly the old models plus this one.
 */
export function withModelBlock(text: string, m: ModelManifest, o: { replace?: boolean; file?: string } = {}): string {
  const what = o.file ?? "config";
  const before = parseToml(text, what);
  const oldModels = Array.isArray(before.models) ? (before.models as Record<string, unknown>[]) : [];
  const block = manifestToml(m);
  const lines = text.split("\n");
  let out: string;
  if (oldModels.some((x) => x.id === m.id)) {
    if (!o.replace) throw new AddError(`${what}: model "${m.id}" is already in it (--force replaces its entry)`);
    const hit = modelBlocks(lines).find((b) => firstModel(lines.slice(b.start, b.end).join("\n"), what)?.id === m.id);
    if (!hit) throw new AddError(`${what}: model "${m.id}" is not written as a [[models]] block, so it cannot be replaced; edit it by hand`);
    out = [...lines.slice(0, hit.start), ...block.split("\n"), ...lines.slice(hit.end)].join("\n");
  } else {
    const base = text.replace(/\s*$/, "");
    out = `${base}${base ? "\n\n" : ""}${block}\n`;
  }
  const after = parseToml(out, `${what} (as edited)`);
  const newModels = Array.isArray(after.models) ? (after.models as Record<string, unknown>[]) : [];
  const expected = [...oldModels.filter((x) => x.id !== m.id), firstModel(block, "block")].map((x) => JSON.stringify(x)).sort();
  const { models: _a, ...restAfter } = after;
  const { models: _b, ...restBefore } = before;
  if (JSON.stringify(newModels.map((x) => JSON.stringify(x)).sort()) !== JSON.stringify(expected) || JSON.stringify(restAfter) !== JSON.stringify(restBefore))
    throw new AddError(`${what}: the [[models]] block could not be added without changing the rest of the file; add it by hand:\n${block}`);
  return out;
}
