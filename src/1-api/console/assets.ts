// The console's files (web/), imported as text so the compiled executable carries them; a test
// checks that every file in web/ is listed here. (TypeScript has no type for a text import of
// .js/.css/.html; Bun gives each a string.)
// @ts-ignore
import adminJs from "../../../web/admin.js" with { type: "text" };
// @ts-ignore
import apiJs from "../../../web/api.js" with { type: "text" };
// @ts-ignore
import appJs from "../../../web/app.js" with { type: "text" };
// @ts-ignore
import batchesJs from "../../../web/batches.js" with { type: "text" };
// @ts-ignore
import chartJs from "../../../web/chart.js" with { type: "text" };
// @ts-ignore
import docsJs from "../../../web/docs.js" with { type: "text" };
// @ts-ignore
import domJs from "../../../web/dom.js" with { type: "text" };
import indexHtml from "../../../web/index.html" with { type: "text" };
// @ts-ignore
import keysJs from "../../../web/keys.js" with { type: "text" };
// @ts-ignore
import modelsJs from "../../../web/models.js" with { type: "text" };
// @ts-ignore
import playgroundJs from "../../../web/playground.js" with { type: "text" };
// @ts-ignore
import playgroundDecisionsJs from "../../../web/playground-decisions.js" with { type: "text" };
// @ts-ignore
import playgroundRerankJs from "../../../web/playground-rerank.js" with { type: "text" };
// @ts-ignore
import playgroundSharedJs from "../../../web/playground-shared.js" with { type: "text" };
// @ts-ignore
import rentalsJs from "../../../web/rentals.js" with { type: "text" };
// @ts-ignore
import sseJs from "../../../web/sse.js" with { type: "text" };
// @ts-ignore
import styleCss from "../../../web/style.css" with { type: "text" };
// @ts-ignore
import usageJs from "../../../web/usage.js" with { type: "text" };
// @ts-ignore
import markdownJs from "../../../web/markdown.js" with { type: "text" };
// @ts-ignore
import highlightJs from "../../../web/highlight.js" with { type: "text" };
// @ts-ignore
import markdownBlocksJs from "../../../web/markdown-blocks.js" with { type: "text" };
// @ts-ignore
import markdownInlineJs from "../../../web/markdown-inline.js" with { type: "text" };
// @ts-ignore
import highlightLanguagesJs from "../../../web/highlight-languages.js" with { type: "text" };
// @ts-ignore
import highlightTokenizersJs from "../../../web/highlight-tokenizers.js" with { type: "text" };
// @ts-ignore
import modelsPullJs from "../../../web/models-pull.js" with { type: "text" };
// @ts-ignore
import chatJs from "../../../web/chat.js" with { type: "text" };
// @ts-ignore
import chatComposeJs from "../../../web/chat-compose.js" with { type: "text" };
// @ts-ignore
import chatMessagesJs from "../../../web/chat-messages.js" with { type: "text" };
// @ts-ignore
import chatListJs from "../../../web/chat-list.js" with { type: "text" };
// @ts-ignore
import chatCss from "../../../web/chat.css" with { type: "text" };
// @ts-ignore
import markdownCss from "../../../web/markdown.css" with { type: "text" };
// @ts-ignore
import modelsCss from "../../../web/models.css" with { type: "text" };

const TYPES: Record<string, string> = { html: "text/html; charset=utf-8", js: "text/javascript; charset=utf-8", css: "text/css; charset=utf-8" };
const FILES: Record<string, string> = {
  "admin.js": adminJs,
  "api.js": apiJs,
  "app.js": appJs,
  "batches.js": batchesJs,
  "chart.js": chartJs,
  "docs.js": docsJs,
  "dom.js": domJs,
  "index.html": indexHtml as unknown as string,
  "keys.js": keysJs,
  "models.js": modelsJs,
  "playground.js": playgroundJs,
  "playground-decisions.js": playgroundDecisionsJs,
  "playground-rerank.js": playgroundRerankJs,
  "playground-shared.js": playgroundSharedJs,
  "rentals.js": rentalsJs,
  "sse.js": sseJs,
  "style.css": styleCss,
  "usage.js": usageJs,
  "markdown.js": markdownJs,
  "highlight.js": highlightJs,
  "markdown-blocks.js": markdownBlocksJs,
  "markdown-inline.js": markdownInlineJs,
  "highlight-languages.js": highlightLanguagesJs,
  "highlight-tokenizers.js": highlightTokenizersJs,
  "models-pull.js": modelsPullJs,
  "chat.js": chatJs,
  "chat-compose.js": chatComposeJs,
  "chat-messages.js": chatMessagesJs,
  "chat-list.js": chatListJs,
  "chat.css": chatCss,
  "markdown.css": markdownCss,
  "models.css": modelsCss,
};

const HEADERS = {
  "cache-control": "no-cache",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
};

/** The names of the console's files. */
export const CONSOLE_FILES = Object.keys(FILES);

/** One console file, or null when there is none of that name. */
export function consoleAsset(name: string): Response | null {
  if (!Object.hasOwn(FILES, name)) return null; // "toString" names no file either
  const body = FILES[name]!;
  const type = TYPES[name.slice(name.lastIndexOf(".") + 1)] ?? "application/octet-stream";
  return new Response(body, { headers: { ...HEADERS, "content-type": type } });
}
