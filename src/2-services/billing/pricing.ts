import type { Config } from "../../lib/config";
import type { ModelManifest } from "../../lib/manifest";

// Prices are held as integers: micro-dollars per million tokens, micro-dollars per image,
// and the batch share in basis points. A request's cost is rounded up to a whole micro-dollar.

export interface Price {
  inputPerM: number;
  outputPerM: number;
  perImage: number;
}

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  images: number;
}

const USD = 1_000_000;

export function usdToMicros(usd: number): number {
  return Math.round(usd * USD);
}

export function formatMicros(micros: number): string {
  const sign = micros < 0 ? "-" : "";
  const abs = Math.abs(micros);
  const whole = Math.floor(abs / USD);
  const frac = String(abs % USD).padStart(6, "0").replace(/0{1,4}$/, "");
  return `${sign}$${whole}.${frac.padEnd(2, "0")}`;
}

/** The model's own price where its manifest sets one, else the default for its kind (spec §8). */
export function priceFor(model: Pick<ModelManifest, "kind" | "price">, prices: Config["prices"]): Price {
  const p = model.price ?? {};
  switch (model.kind) {
    case "chat":
      return {
        inputPerM: usdToMicros(p.input_per_m ?? prices.chat_input_per_m),
        outputPerM: usdToMicros(p.output_per_m ?? prices.chat_output_per_m),
        perImage: 0,
      };
    case "classifier":
      return { inputPerM: usdToMicros(p.input_per_m ?? prices.classifier_input_per_m), outputPerM: 0, perImage: 0 };
    case "reranker":
      return { inputPerM: usdToMicros(p.input_per_m ?? prices.reranker_input_per_m), outputPerM: 0, perImage: 0 };
    case "embedding":
      return { inputPerM: usdToMicros(p.input_per_m ?? prices.embedding_input_per_m), outputPerM: 0, perImage: 0 };
    case "image":
      return { inputPerM: 0, outputPerM: 0, perImage: usdToMicros(p.per_image ?? prices.image_per_image) };
  }
}

/** What a model costs, in USD, as /v1/models and the console show it: the fields its kind bills. */
export interface ModelPricing {
  input_per_m?: number;
  output_per_m?: number;
  decision_input_per_m?: number;
  per_image?: number;
  /** The share of the price a batch line pays (0.5: half). */
  batch_share: number;
}

export function pricingOf(model: Pick<ModelManifest, "kind" | "price">, prices: Config["prices"]): ModelPricing {
  const p = priceFor(model, prices);
  const usd = (micros: number) => micros / USD;
  const batch_share = prices.batch_discount;
  switch (model.kind) {
    case "chat":
      return { input_per_m: usd(p.inputPerM), output_per_m: usd(p.outputPerM), decision_input_per_m: usd(decisionPriceFor(model, prices).inputPerM), batch_share };
    case "image":
      return { per_image: usd(p.perImage), batch_share };
    default:
      return { input_per_m: usd(p.inputPerM), batch_share };
  }
}

/** A chat model's /v1/decisions price: input tokens only (its manifest's, else the config's). */
export function decisionPriceFor(model: Pick<ModelManifest, "price">, prices: Config["prices"]): Price {
  return { inputPerM: usdToMicros(model.price?.decision_input_per_m ?? prices.decision_input_per_m), outputPerM: 0, perImage: 0 };
}

/** Cost in micro-dollars, rounded up; `batchBasisPoints` (e.g. 5000 = 50 %) applies to batch lines. */
export function costMicros(price: Price, usage: Usage, batchBasisPoints: number | null = null): number {
  const scaled =
    BigInt(usage.inputTokens) * BigInt(price.inputPerM) +
    BigInt(usage.outputTokens) * BigInt(price.outputPerM) +
    BigInt(usage.images) * BigInt(price.perImage) * BigInt(USD);
  const num = batchBasisPoints === null ? scaled : scaled * BigInt(batchBasisPoints);
  const den = BigInt(USD) * (batchBasisPoints === null ? 1n : 10_000n);
  return Number((num + den - 1n) / den);
}

export function batchBasisPoints(prices: Config["prices"]): number {
  return Math.round(prices.batch_discount * 10_000);
}

/** "12.5" → 12_500_000 exactly (no float rounding); up to six decimals. */
export function parseUsd(text: string): number {
  const m = /^\s*\$?(\d+)(?:\.(\d{1,6}))?\s*$/.exec(text);
  if (!m) throw new Error(`not a dollar amount: "${text}" (e.g. 10 or 2.50, up to 6 decimals)`);
  const micros = Number(m[1]) * USD + Number((m[2] ?? "").padEnd(6, "0"));
  if (!Number.isSafeInteger(micros)) throw new Error(`amount too large: ${text}`);
  return micros;
}
