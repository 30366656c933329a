/** Manifests for listing and pricing tests (no engine loads them here). */
export function manifestConfig() {
  return {
    models: [
      { id: "big-chat", name: "Big Chat", kind: "chat", files: { model: "chat.gguf", mmproj: "chat-mmproj.gguf" }, max_context: 32768, vision: true, slots: 2 },
      { id: "small-chat", name: "Small Chat", kind: "chat", files: { model: "small.gguf" }, max_context: 16384 },
      { id: "org/embed-384", name: "Embed", kind: "embedding", files: { model: "embed" }, max_context: 512 },
    ],
    retired_models: [{ id: "old-chat", replaced_by: "big-chat" }],
  };
}
