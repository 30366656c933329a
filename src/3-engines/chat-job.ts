// The chat job: what every wire format is turned into before it reaches an engine. It is the
// OpenAI chat-completions request (the canonical format, STYLE) with its rules already checked.

export type JsonSchema = Record<string, unknown>;

export interface ImageInput {
  url: string;
  /** Where the part sits in the request, for errors: "messages[1].content[0]". */
  param: string;
  /** Offset in the user turn's text where the image sits (between the text parts around it). */
  at: number;
  /** The pixels, once the service has fetched and decoded the image (chat/images.ts). */
  decoded?: DecodedImage;
}

export interface DecodedImage {
  /** 8-bit RGB, row-major, width*height*3 bytes. */
  rgb: Uint8Array;
  width: number;
  height: number;
  /** SHA-256 of the pixels and size: the same image gives the same hash (prompt-cache identity). */
  hash: string;
}

export interface ToolCallIn {
  id: string;
  name: string;
  /** JSON text, as sent. */
  arguments: string;
}

export type ChatTurn =
  | { role: "system"; text: string }
  | { role: "user"; text: string; images: ImageInput[] }
  | { role: "assistant"; text: string; reasoning: string; toolCalls: ToolCallIn[] }
  | { role: "tool"; toolCallId: string; text: string };

export interface ToolSpec {
  name: string;
  description?: string;
  parameters?: JsonSchema;
  /**
   * true: the parameters are enforced token by token and a keyword the grammar cannot enforce is
   * refused (400). Otherwise the schema is a hint: what the grammar cannot express is dropped.
   */
  strict?: boolean;
}

export type ToolChoice = "none" | "auto" | "required" | { name: string };

export type OutputFormat =
  | null
  | { type: "json_object" }
  /** `param`: the field the schema came in, for errors raised when its grammar is built (default response_format.json_schema.schema). */
  | { type: "json_schema"; name: string; schema: JsonSchema; param?: string };

export interface Sampling {
  temperature?: number;
  topP?: number;
  topK?: number;
  seed?: number;
  frequencyPenalty?: number;
  presencePenalty?: number;
  /** token id → bias in OpenAI's -100…100 scale */
  logitBias?: Map<number, number>;
}

export interface ChatJob {
  model: string;
  turns: ChatTurn[];
  tools: ToolSpec[];
  toolChoice: ToolChoice;
  parallelToolCalls: boolean;
  format: OutputFormat;
  /** null: the model's default (on for models that think). */
  thinking: boolean | null;
  /** null: as many as the context leaves. */
  maxTokens: number | null;
  stop: string[];
  sampling: Sampling;
  stream: boolean;
  includeUsage: boolean;
  /** The client's prompt_cache_key: the request prefers the worker slot that last served the same key. */
  cacheKey?: string;
}

/** What an engine reports while generating. */
export type EngineEvent =
  | { type: "reasoning"; text: string }
  | { type: "text"; text: string }
  | { type: "tool_call"; index: number; name: string }
  | { type: "tool_args"; index: number; text: string };

export type FinishReason = "stop" | "length" | "tool_calls";

export interface EngineResult {
  finishReason: FinishReason;
  /** The stop sequence that ended the answer, when one did. */
  stopSequence: string | null;
  promptTokens: number;
  completionTokens: number;
  reasoningTokens: number;
  cachedTokens: number;
  toolCalls: { name: string; arguments: string }[];
}
