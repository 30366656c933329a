import { Type as T, type Static } from "@sinclair/typebox";

// POST /v1/images/generations (spec §2.8), declared once: it validates the HTTP body and, later,
// batch lines. Unknown fields are accepted; the OpenAI fields this server cannot honour are
// declared here so the translator (src/2-services/images/from-request.ts) can refuse them by name.

const Nullable = <S extends Parameters<typeof T.Union>[0][number]>(s: S) => T.Optional(T.Union([s, T.Null()]));

export const MAX_SEED = 4_294_967_295;

export const ImagesRequest = T.Object({
  model: T.String({ minLength: 1 }),
  prompt: T.String({ minLength: 1, maxLength: 32_000 }),
  /** "<W>x<H>", 256–1536 each, multiples of 16; "auto" = the default. */
  size: Nullable(T.String()),
  n: Nullable(T.Integer({ minimum: 1, maximum: 4 })),
  /** Image i of the request uses seed + i (mod 2^32). */
  seed: Nullable(T.Integer({ minimum: 0, maximum: MAX_SEED })),
  /** Extension: denoiser steps. */
  steps: Nullable(T.Integer({ minimum: 1, maximum: 50 })),
  response_format: Nullable(T.String()),
  output_format: Nullable(T.String()),
  output_compression: Nullable(T.Integer()),
  quality: Nullable(T.String()),
  style: Nullable(T.String()),
  background: Nullable(T.String()),
  moderation: Nullable(T.String()),
  stream: Nullable(T.Boolean()),
  partial_images: Nullable(T.Integer()),
  user: Nullable(T.String()),
});
export type ImagesRequest = Static<typeof ImagesRequest>;

/** The response: OpenAI's ImagesResponse, plus each image's seed (extension). */
export interface ImagesResponse {
  created: number;
  data: { b64_json: string; seed: number }[];
  size: string;
  output_format: "png";
}
