import { expect, test } from "bun:test";
import { OpenAIEmbeddings } from "@langchain/openai";
import { useDemoServer } from "./demo-server";
import { expectAnswered, type RecordingProxy } from "./recording-proxy";

// LangChain's OpenAIEmbeddings (@langchain/openai, unmodified) against `serve --demo`'s embeddings
// model, pointed at the server with `configuration.baseURL`.

let key: string;
let proxy: RecordingProxy;
useDemoServer((s) => ({ key, proxy } = s));

test("OpenAIEmbeddings: documents and a query embed to finite vectors of one length", async () => {
  const embeddings = new OpenAIEmbeddings({ model: "demo-embed", apiKey: key, configuration: { baseURL: `${proxy.url}/v1` }, maxRetries: 0 });
  const { result, sent } = await proxy.recording(async () => ({ docs: await embeddings.embedDocuments(["a cat", "a dog"]), query: await embeddings.embedQuery("pets") }));
  expect(result.docs.length).toBe(2);
  expect(result.docs[0]!.length).toBeGreaterThan(0);
  expect(result.docs[1]!.length).toBe(result.docs[0]!.length);
  expect(result.query.length).toBe(result.docs[0]!.length);
  for (const v of [...result.docs, result.query]) expect(v.every(Number.isFinite)).toBe(true);
  // It asks for base64 by default (smaller on the wire) and decodes it itself.
  expect(sent.map((r) => (r.body as { encoding_format?: string }).encoding_format)).toEqual(["base64", "base64"]);
  expectAnswered(sent);
}, 60_000);
