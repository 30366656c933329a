import { Type as T, type Static, type TSchema } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { unixSeconds, type Clock } from "../../lib/clock";
import { pointerToDotted } from "../../lib/config";
import { ApiError } from "../../lib/errors";
import { newId } from "../../lib/ids";
import type { Conversation, ConversationStore, PositionedMessage } from "../../4-store/conversations";
import { MAX_SEED } from "../images/request";

// The console's chat conversations (issue 48), kept per signed-in account: what the Chat page
// (web/chat*.js) lists, opens, renames, deletes and appends to. Everything it stores is checked
// here against the schemas below — unknown fields refused by name — so the store never holds junk;
// the bounds are constants of this file (web/docs/operations.md, "Console chat conversations").

/** Conversations one account keeps: creating one more is 409 conflict. */
export const MAX_CONVERSATIONS_PER_ACCOUNT = 1_000;
/** Bytes of one conversation's messages as stored (their JSON, images inline): an append past it is refused, nothing written. */
export const MAX_CONVERSATION_BYTES = 32 * 1024 * 1024;
/** One attached image, decoded. */
export const MAX_IMAGE_BYTES = 8 * 1024 * 1024;
export const MAX_IMAGES_PER_MESSAGE = 4;
/** Messages one append adds (a user message, the reply, and room for a tool round). */
export const MAX_APPENDED = 4;
export const MAX_TITLE = 200;
export const DEFAULT_TITLE = "New conversation";
export const LIST_DEFAULT = 100;
export const LIST_MAX = 500;

const closed = { additionalProperties: false } as const;
const Count = T.Integer({ minimum: 0 });
/** The images API's bounds (src/2-services/images/request.ts). */
const ImageParams = T.Object(
  {
    size: T.Optional(T.String({ maxLength: 32 })),
    n: T.Optional(T.Integer({ minimum: 1, maximum: 4 })),
    seed: T.Optional(T.Integer({ minimum: 0, maximum: MAX_SEED })),
    steps: T.Optional(T.Integer({ minimum: 1, maximum: 50 })),
  },
  closed,
);

const IMAGE_DATA_URL = "^data:image/(png|jpeg|webp|gif);base64,";
/** An attached image as the page read it: a base64 data URL of a PNG, JPEG, WebP or GIF (checked further by imageError). */
const ImageDataUrl = T.String({ pattern: IMAGE_DATA_URL, description: "`data:image/(png|jpeg|webp|gif);base64,…`, at most 8 MiB decoded." });

export const ConversationMessage = T.Object(
  {
    role: T.Union([T.Literal("user"), T.Literal("assistant")]),
    content: T.String({ maxLength: 1_000_000 }),
    images: T.Optional(T.Array(ImageDataUrl, { maxItems: MAX_IMAGES_PER_MESSAGE })),
    reasoning: T.Optional(T.String({ maxLength: 1_000_000 })),
    tool_calls: T.Optional(
      T.Array(T.Object({ id: T.Optional(T.String({ maxLength: 256 })), name: T.String({ maxLength: 256 }), arguments: T.String({ maxLength: 1_000_000 }) }, closed), { maxItems: 64 }),
    ),
    model: T.Optional(T.String({ maxLength: 256 })),
    request_id: T.Optional(T.String({ maxLength: 256 })),
    usage: T.Optional(
      T.Object({ input_tokens: T.Optional(Count), output_tokens: T.Optional(Count), cached_tokens: T.Optional(Count), cost_usd: T.Optional(T.Number({ minimum: 0 })) }, closed),
    ),
    finish: T.Optional(T.Union(["stop", "length", "tool_calls", "stopped", "error", "content_filter"].map((f) => T.Literal(f)))),
    error: T.Optional(T.String({ maxLength: 2_000 })),
    image_params: T.Optional(ImageParams),
    /** Unix seconds; the server sets it when absent. */
    created_at: T.Optional(Count),
  },
  closed,
);
export type ConversationMessage = Static<typeof ConversationMessage>;

export const ConversationSettings = T.Object(
  {
    system: T.Optional(T.String({ maxLength: 100_000 })),
    temperature: T.Optional(T.Number({ minimum: 0, maximum: 2 })),
    max_tokens: T.Optional(T.Integer({ minimum: 1, maximum: 1_000_000 })),
    /** The tools' JSON as the user typed it (the page parses it when it sends). */
    tools: T.Optional(T.String({ maxLength: 100_000 })),
    image: T.Optional(ImageParams),
  },
  closed,
);

const Fields = {
  title: T.Optional(T.String({ maxLength: MAX_TITLE, description: `Trimmed; at most ${MAX_TITLE} characters.` })),
  model: T.Optional(T.Union([T.String({ maxLength: 256 }), T.Null()])),
  settings: T.Optional(ConversationSettings),
};
/** POST /console/api/conversations. */
export const CreateConversationRequest = T.Object(Fields, closed);
/** PATCH /console/api/conversations/{id}: a title, if given, must not be blank. */
export const UpdateConversationRequest = T.Object(Fields, closed);
/** POST /console/api/conversations/{id}/messages. */
export const AppendMessagesRequest = T.Object(
  {
    keep: T.Integer({ minimum: 0, description: "Messages kept from the start; the rest are deleted first (edit-and-resend, regenerate). More than the conversation holds: 409 conflict." }),
    count: T.Optional(
      T.Integer({ minimum: 0, description: "The number of messages the writer last saw: another number means another tab wrote since, 409 conflict and nothing written." }),
    ),
    messages: T.Array(ConversationMessage, { maxItems: MAX_APPENDED }),
  },
  closed,
);
/** GET /console/api/conversations (the query is read by hand: list() below). */
export const ListConversationsQuery = T.Object({
  q: T.Optional(T.String({ description: "A case-insensitive substring of the title." })),
  limit: T.Optional(T.Integer({ minimum: 1, maximum: LIST_MAX, default: LIST_DEFAULT })),
});

export interface ConversationsDeps {
  store: ConversationStore;
  clock: Clock;
}

export type ConversationsService = ReturnType<typeof createConversationsService>;

export function createConversationsService(d: ConversationsDeps) {
  const notFound = (id: string) => new ApiError("not_found", `No such conversation: ${id}`);
  /** Ids are not secrets: another account's conversation, or no conversation at all, is the same 404. */
  const ownId = (id: string) => {
    if (!id.startsWith("conv_")) throw notFound(id);
    return id;
  };

  return {
    async list(accountId: string, query: { q?: unknown; limit?: unknown }) {
      const q = query.q === undefined ? "" : query.q;
      if (typeof q !== "string") throw new ApiError("invalid_request", "q: give one search text", { param: "q" });
      const limit = query.limit === undefined ? LIST_DEFAULT : typeof query.limit === "string" && /^\d{1,4}$/.test(query.limit) ? Number(query.limit) : NaN;
      if (!(limit >= 1 && limit <= LIST_MAX)) throw new ApiError("invalid_request", `limit: must be an integer from 1 to ${LIST_MAX}`, { param: "limit" });
      const rows = await d.store.list({ accountId, search: q.trim() || undefined, limit });
      return { data: rows.map(({ settings: _, ...c }) => listed(c)) };
    },

    async create(accountId: string, body: unknown) {
      const b = check(CreateConversationRequest, body ?? {});
      const made = await d.store.create(
        { id: newId("conv_"), accountId, title: b.title?.trim() || DEFAULT_TITLE, model: b.model ?? null, settings: b.settings ?? {}, now: d.clock.now() },
        MAX_CONVERSATIONS_PER_ACCOUNT,
      );
      if (made === "too_many") throw new ApiError("conflict", `an account keeps at most ${MAX_CONVERSATIONS_PER_ACCOUNT} conversations; delete some`);
      return { ...view(made), messages: [] };
    },

    async get(accountId: string, id: string) {
      const found = await d.store.read(accountId, ownId(id));
      if (!found) throw notFound(id);
      return { ...view(found.conversation), messages: found.messages.map(positioned) };
    },

    async update(accountId: string, id: string, body: unknown) {
      const b = check(UpdateConversationRequest, body);
      const title = b.title?.trim();
      if (title === "") throw new ApiError("invalid_request", "title: must not be empty", { param: "title" });
      const changed = await d.store.update(accountId, ownId(id), { title, model: b.model, settings: b.settings }, d.clock.now());
      if (!changed) throw notFound(id);
      return view(changed);
    },

    async remove(accountId: string, id: string) {
      if (!(await d.store.remove(accountId, ownId(id)))) throw notFound(id);
      return { id, deleted: true };
    },

    /** Cuts the conversation back to `keep` messages and appends the new ones, in one transaction. */
    async append(accountId: string, id: string, body: unknown) {
      const b = check(AppendMessagesRequest, body);
      b.messages.forEach((m, i) => m.images?.forEach((url, j) => imageError(url, `messages[${i}].images[${j}]`)));
      const at = unixSeconds(d.clock.now());
      const messages = b.messages.map((m) => ({ ...m, created_at: m.created_at ?? at }));
      const out = await d.store.append({ accountId, id: ownId(id), keep: b.keep, ...(b.count !== undefined ? { count: b.count } : {}), messages, now: d.clock.now() }, MAX_CONVERSATION_BYTES);
      if ("conversation" in out) return { conversation: view(out.conversation), messages: out.messages.map(positioned) };
      if (out.miss === "not_found") throw notFound(id);
      if (out.miss === "conflict") throw new ApiError("conflict", "the conversation changed elsewhere (another tab?); reload it", { param: b.count !== undefined ? "count" : "keep" });
      throw new ApiError(
        "invalid_request",
        `the conversation would hold ${out.bytes} bytes, more than the ${MAX_CONVERSATION_BYTES} (32 MiB) one conversation may hold; start a new conversation`,
        { param: "messages" },
      );
    },
  };
}

function view(c: Conversation) {
  return { id: c.id, title: c.title, model: c.model, settings: c.settings, created_at: unixSeconds(c.createdAt), updated_at: unixSeconds(c.updatedAt), message_count: c.messageCount };
}
function listed(c: Omit<Conversation, "settings">) {
  return { id: c.id, title: c.title, model: c.model, created_at: unixSeconds(c.createdAt), updated_at: unixSeconds(c.updatedAt), message_count: c.messageCount };
}
const positioned = (m: PositionedMessage) => ({ seq: m.seq, ...(m.body as object) });

/** The value as its schema types it, or a 400 naming the first field at fault (the deepest one). */
function check<S extends TSchema>(schema: S, value: unknown): Static<S> {
  if (Value.Check(schema, value)) return value as Static<S>;
  const errors: { path: string; message: string; schema: TSchema; value: unknown }[] = [];
  for (const e of Value.Errors(schema, value)) if (errors.push(e) >= 64) break;
  const e = errors.find((x) => x.path === "") ?? [...errors].sort((a, b) => b.path.length - a.path.length)[0]!;
  const param = pointerToDotted(e.path) || null;
  if (!param) throw new ApiError("invalid_request", "the body must be a JSON object");
  throw new ApiError("invalid_request", `${param}: ${describe(e)}`, { param });
}

function describe(e: { message: string; schema: TSchema; value: unknown }): string {
  const s = e.schema as { anyOf?: { const?: unknown; type?: string; maxLength?: number }[]; pattern?: string };
  if (e.message.startsWith("Unexpected property")) return "unknown field";
  if (e.message === "Expected required property") return "is required";
  if (s.pattern === IMAGE_DATA_URL) return "must be a data URL of a PNG, JPEG, WebP or GIF image (data:image/png;base64,…)";
  if (s.anyOf?.every((v) => v.const !== undefined)) return `must be one of ${s.anyOf.map((v) => JSON.stringify(v.const)).join(", ")}`;
  if (s.anyOf) return `must be ${s.anyOf.map((v) => (v.type === "null" ? "null" : `a ${v.type}${v.maxLength !== undefined ? ` of at most ${v.maxLength} characters` : ""}`)).join(" or ")}`;
  return e.message.charAt(0).toLowerCase() + e.message.slice(1);
}

const SIGNATURES: [string, (b: Buffer) => boolean][] = [
  ["png", (b) => b.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))],
  ["jpeg", (b) => b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff],
  ["gif", (b) => b.subarray(0, 6).toString("latin1") === "GIF87a" || b.subarray(0, 6).toString("latin1") === "GIF89a"],
  ["webp", (b) => b.subarray(0, 4).toString("latin1") === "RIFF" && b.subarray(8, 12).toString("latin1") === "WEBP"],
];

/** Refuses a data URL whose base64 does not decode, past MAX_IMAGE_BYTES, or whose bytes are no PNG, JPEG, WebP or GIF. */
function imageError(url: string, param: string): void {
  const b64 = url.slice(url.indexOf(",") + 1);
  if (b64.length > Math.ceil(MAX_IMAGE_BYTES / 3) * 4) throw new ApiError("invalid_request", `${param}: the image is larger than ${MAX_IMAGE_BYTES} bytes (8 MiB)`, { param });
  if (b64.length === 0 || b64.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) throw new ApiError("invalid_request", `${param}: the data URL is not valid base64`, { param });
  const head = Buffer.from(b64.slice(0, 24), "base64");
  const bytes = (b64.length / 4) * 3 - (b64.endsWith("==") ? 2 : b64.endsWith("=") ? 1 : 0);
  if (bytes > MAX_IMAGE_BYTES) throw new ApiError("invalid_request", `${param}: the image is larger than ${MAX_IMAGE_BYTES} bytes (8 MiB)`, { param });
  if (!SIGNATURES.some(([, is]) => is(head))) throw new ApiError("invalid_request", `${param}: the data is not a PNG, JPEG, WebP or GIF image`, { param });
}
