// The opaque `encrypted_content` of a reasoning item (include: ["reasoning.encrypted_content"]).
// This server keeps nothing between requests, so the thought travels with the client: the item
// carries the thought's own text, encoded, and the next request's input hands it back to the
// model's history. It is an encoding, not a secret *(choice)*: the thought is the client's own
// conversation, which it could equally send back as assistant text; a signature would protect
// nothing the client cannot already write. The prefix marks this server's format, so the content
// of another server's items (OpenAI's real ciphertext) is recognised and left aside.

const PREFIX = "lrs1.";

export function encodeThought(text: string): string {
  return PREFIX + Buffer.from(text, "utf8").toString("base64url");
}

/** The thought inside this server's encrypted_content; null for another server's content. Throws on a damaged one. */
export function decodeThought(content: string): string | null {
  if (!content.startsWith(PREFIX)) return null;
  const body = content.slice(PREFIX.length);
  if (!/^[A-Za-z0-9_-]*$/.test(body)) throw new Error("is not this server's encoding (damaged base64url)");
  const text = Buffer.from(body, "base64url").toString("utf8");
  if (text.includes("\uFFFD") && encodeThought(text) !== content) throw new Error("is not this server's encoding (not UTF-8 text)");
  return text;
}
