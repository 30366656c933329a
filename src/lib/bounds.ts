// The contract's per-request bounds that two layers need: the services refuse a request past them
// (a named 400), and the memory planner sizes a model's working memory for the largest request
// they allow (src/3-engines/planner/onnx-profile.ts).

/** Classification (spec §2.7): tokens per item, at most (or the model's own length if smaller). */
export const MAX_CLASSIFY_TOKENS = 4096;

/** Image generation (spec §2.8): each side from MIN_SIDE to MAX_SIDE pixels, a multiple of 16. */
export const MIN_SIDE = 256;
export const MAX_SIDE = 1536;
