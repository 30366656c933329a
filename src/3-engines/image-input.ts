import { createHash } from "node:crypto";
import sharp, { type Metadata } from "sharp";
import { ApiError } from "../lib/errors";
import type { Config } from "../lib/config";
import { FetchRefused, safeFetch, type SafeFetchOptions } from "../lib/net/safe-fetch";
import type { ChatJob, DecodedImage, ImageInput } from "./chat-job";

// Images of a chat request, fetched and decoded before the engine sees them: base64 data URLs, or
// https URLs (http ones too with image_input.allow_http_urls) fetched by the server (timeout, size
// cap, no internal addresses unless the admin allows them, every redirect checked again, the
// connection pinned to the checked address: see net/safe-fetch.ts). PNG, JPEG, WebP and GIF (first
// frame), decoded by sharp into RGB and scaled down to `max_side`; an image of more than MAX_PIXELS
// is refused from its header, before any pixel is decoded (a small file can declare 30000×30000).
// Errors name the part ("messages[1].content[0]") and say what is accepted as configured.

/** Spec: a chat request carries at most this many images. */
export const MAX_IMAGES_PER_REQUEST = 2;
const FORMATS = new Set(["png", "jpeg", "webp", "gif"]);
const MAX_REDIRECTS = 3;
/** Largest image decoded, in pixels (10000×10000): ~300 MB of RGB before scaling. */
export const MAX_PIXELS = 100_000_000;

export type ImageInputOptions = Config["image_input"];

export function imagesOf(job: ChatJob): ImageInput[] {
  return job.turns.flatMap((t) => (t.role === "user" ? t.images : []));
}

/** How URLs are resolved and judged (net/safe-fetch.ts); tests swap them. */
export type ImageFetchDeps = Pick<SafeFetchOptions, "resolve" | "classify">;

/** Fetches and decodes every image of the job into `decoded`. */
export async function decodeImages(job: ChatJob, o: ImageInputOptions, deps: ImageFetchDeps = {}): Promise<void> {
  const images = imagesOf(job);
  if (images.length > MAX_IMAGES_PER_REQUEST)
    throw new ApiError("too_many_images", `a request may carry at most ${MAX_IMAGES_PER_REQUEST} images; this one has ${images.length} (${images[MAX_IMAGES_PER_REQUEST]!.param} is one too many)`, {
      param: images[MAX_IMAGES_PER_REQUEST]!.param,
    });
  await Promise.all(
    images.map(async (img) => {
      img.decoded = await decode(await bytesOf(img, o, deps), img.param, o.max_side);
    }),
  );
}

async function bytesOf(img: ImageInput, o: ImageInputOptions, deps: ImageFetchDeps): Promise<Uint8Array> {
  const url = img.url.trim();
  if (/^data:/i.test(url)) return dataUrlBytes(url, img.param, o.max_bytes);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw urlError(img.param, `${mustBe(o)} (it does not parse as a URL)`);
  }
  return fetchBytes(parsed, img.param, o, deps);
}

function dataUrlBytes(url: string, param: string, maxBytes: number): Uint8Array {
  const m = /^data:([^;,]*)((?:;[^;,]*)*),(.*)$/is.exec(url);
  if (!m || !/;base64$/i.test(m[2]!)) throw imageError(param, "a data URL image must be base64 (data:image/png;base64,...)");
  const b64 = m[3]!.replace(/\s+/g, "");
  if (b64.length === 0) throw imageError(param, "the data URL holds no data");
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(b64)) throw imageError(param, "the data URL is not valid base64");
  if ((b64.length * 3) / 4 > maxBytes) throw imageError(param, `the image is larger than ${maxBytes} bytes`);
  return Buffer.from(b64, "base64");
}

async function fetchBytes(url: URL, param: string, o: ImageInputOptions, deps: ImageFetchDeps): Promise<Uint8Array> {
  const signal = AbortSignal.timeout(o.fetch_timeout_s * 1000);
  let res: Response;
  try {
    res = await safeFetch(url, {
      protocols: o.allow_http_urls ? ["https:", "http:"] : ["https:"],
      allowPrivate: o.allow_private_urls,
      maxRedirects: MAX_REDIRECTS,
      signal,
      headers: { accept: "image/*" },
      ...deps,
    });
  } catch (e) {
    if (!(e instanceof FetchRefused)) throw e;
    throw urlError(param, refusalMessage(e, o));
  }
  if (!res.ok) {
    await res.body?.cancel();
    throw urlError(param, `could not be fetched (the server answered ${res.status})`);
  }
  return readCapped(res, param, o.max_bytes, signal);
}

/** What an image URL may be, in words that follow image_input.allow_http_urls. */
const mustBe = (o: ImageInputOptions) => `must be ${o.allow_http_urls ? "https://, http://" : "https://"} or a base64 data URL`;

function refusalMessage(e: FetchRefused, o: ImageInputOptions): string {
  switch (e.kind) {
    case "scheme":
      return `${mustBe(o)} (${e.detail})`;
    case "internal":
      return `${e.detail}; the server fetches only public addresses unless image_input.allow_private_urls is set`;
    case "timeout":
      return `could not be fetched (timed out after ${o.fetch_timeout_s} s)`;
    case "unreachable":
      return `could not be fetched (${e.detail})`;
    default:
      return e.detail;
  }
}

async function readCapped(res: Response, param: string, maxBytes: number, signal: AbortSignal): Promise<Uint8Array> {
  const declared = Number(res.headers.get("content-length") ?? NaN);
  if (declared > maxBytes) {
    await res.body?.cancel();
    throw imageError(param, `the image is larger than ${maxBytes} bytes`);
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for await (const c of res.body as unknown as AsyncIterable<Uint8Array>) {
      total += c.byteLength;
      if (total > maxBytes) {
        await res.body?.cancel().catch(() => {});
        throw imageError(param, `the image is larger than ${maxBytes} bytes`);
      }
      chunks.push(c);
    }
  } catch (e) {
    if (e instanceof ApiError) throw e;
    throw urlError(param, `could not be fetched (${signal.aborted ? "timed out" : (e as Error).message})`);
  }
  return Buffer.concat(chunks);
}

async function decode(bytes: Uint8Array, param: string, maxSide: number): Promise<DecodedImage> {
  let meta: Metadata;
  try {
    // the header only; sharp's own default pixel limit would make a large one "not an image"
    meta = await sharp(bytes, { limitInputPixels: false }).metadata();
  } catch {
    throw imageError(param, "is not an image (PNG, JPEG, WebP or GIF expected)");
  }
  const format = meta.format;
  if (!format || !FORMATS.has(format)) throw imageError(param, `is a ${format ?? "unknown"} image; PNG, JPEG, WebP and GIF are accepted`);
  const height = meta.pageHeight ?? meta.height;
  if (meta.width * height > MAX_PIXELS) throw tooManyPixels(param, { width: meta.width, height });
  try {
    const { data, info } = await sharp(bytes, { pages: 1, limitInputPixels: MAX_PIXELS })
      .rotate()
      .resize({ width: maxSide, height: maxSide, fit: "inside", withoutEnlargement: true })
      .flatten({ background: "#ffffff" })
      .toColourspace("srgb")
      .removeAlpha()
      .raw()
      .toBuffer({ resolveWithObject: true });
    if (info.channels !== 3) throw new Error(`${info.channels} channels`);
    const rgb = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const hash = createHash("sha256").update(`${info.width}x${info.height}:`).update(rgb).digest("hex");
    return { rgb, width: info.width, height: info.height, hash };
  } catch (e) {
    // a header that under-reports its size is still caught by sharp's limit
    if (/pixel limit/i.test((e as Error).message)) throw tooManyPixels(param);
    throw imageError(param, `could not be decoded as ${format.toUpperCase()} (${(e as Error).message})`);
  }
}

const imageError = (param: string, message: string) => new ApiError("invalid_image", `${param}: ${message}`, { param });
const tooManyPixels = (param: string, size?: { width: number; height: number }) => {
  const limit = `the limit of ${MAX_PIXELS.toLocaleString("en")} pixels (${Math.sqrt(MAX_PIXELS)}×${Math.sqrt(MAX_PIXELS)})`;
  const what = size ? `${size.width}×${size.height} is ${(size.width * size.height).toLocaleString("en")} pixels, over ${limit}` : `it has more pixels than ${limit}`;
  return imageError(param, `is too large: ${what}`);
};
const urlError = (param: string, message: string) => new ApiError("invalid_image_url", `${param}: the image URL ${message}`, { param });
