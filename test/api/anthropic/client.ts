import Anthropic from "@anthropic-ai/sdk";
import { BASE, type TestApp } from "../../helpers/app";

/** The official client, unmodified, pointed at the app (STYLE "Contract"). */
export function anthropicClient(t: TestApp, auth: { apiKey: string } | { authToken: string }): Anthropic {
  return new Anthropic({
    apiKey: null,
    authToken: null,
    ...auth,
    baseURL: BASE,
    maxRetries: 0,
    fetch: (url, init) => t.app.handle(new Request(url, init)),
  });
}
