import { Elysia } from "elysia";
import type { ConsoleAuth } from "../../2-services/console/auth";
import type { ConsoleViews } from "../../2-services/console/views";
import { pathOf } from "../http/context";
import { ApiError } from "../http/errors";
import { DEVICE_COOKIE } from "../../2-services/console/devices";
import { consoleAsset } from "./assets";
import { docList, docPage } from "./docs";
import { assertSameOrigin, cookieValue, deviceCookie, requireAdmin, requireSession, sessionCookie } from "./session";

// The web console (web/, embedded): its pages and the JSON API it calls under /console/api.
// Sessions, not API keys; the logic lives in src/2-services/console, over the same services as the API.

type Body = Record<string, unknown>;
const bodyOf = (b: unknown): Body => {
  if (typeof b !== "object" || b === null || Array.isArray(b)) throw new ApiError("invalid_request", "the body must be a JSON object");
  return b as Body;
};

/** `clientOf`: who sent a request (api/http/context.ts), for the sign-in throttle. */
export function consoleRoutes(auth: ConsoleAuth, views: ConsoleViews, clientOf: (req: Request) => { address: string; forwarded: boolean }) {
  const signedIn = (req: Request) => requireSession(auth, req);
  // The Host check (DNS rebinding) runs at the edge for every console route (src/app.ts, admit).
  return new Elysia({ name: "console" })
    .get("/", () => Response.redirect("/console", 302))
    .get("/console", () => consoleAsset("index.html")!)
    // An unknown file is the API's 404 envelope (JSON), as every other error of this server.
    .get("/console/:file", ({ params, request }) => {
      const asset = consoleAsset(params.file);
      if (!asset) throw new ApiError("not_found", `Invalid URL (${request.method} ${pathOf(request.url)}): the console has no such file`);
      return asset;
    })
    .post("/console/api/login", async ({ request, body }) => {
      assertSameOrigin(request);
      const b = bodyOf(body);
      const { token, session, device } = await auth.signIn(b.account, b.password, clientOf(request), cookieValue(request, DEVICE_COOKIE));
      const headers = new Headers({ "cache-control": "no-store" });
      headers.append("set-cookie", sessionCookie(request, token));
      headers.append("set-cookie", deviceCookie(request, device));
      return Response.json({ account: { id: session.accountId, name: session.account, role: session.role }, csrf: session.csrf }, { headers });
    })
    .post("/console/api/logout", async ({ request }) => {
      await signedIn(request);
      await auth.signOut(cookieValue(request));
      return Response.json({ ok: true }, { headers: { "set-cookie": sessionCookie(request, null) } });
    })
    .get("/console/api/session", async ({ request }) => {
      const s = await signedIn(request);
      return { account: { id: s.accountId, name: s.account, role: s.role }, csrf: s.csrf };
    })
    .get("/console/api/account", async ({ request }) => views.account((await signedIn(request)).accountId))
    .get("/console/api/keys", async ({ request }) => views.keys((await signedIn(request)).account))
    .post("/console/api/keys", async ({ request, body }) => views.createKey((await signedIn(request)).account, bodyOf(body)))
    .post("/console/api/keys/:id/revoke", async ({ request, params }) => views.revokeKey((await signedIn(request)).account, params.id))
    .post("/console/api/keys/:id/rotate", async ({ request, params }) => views.rotateKey((await signedIn(request)).account, params.id))
    .patch("/console/api/keys/:id", async ({ request, params, body }) => views.updateKey((await signedIn(request)).account, params.id, bodyOf(body)))
    .get("/console/api/usage", async ({ request, query }) => views.usage((await signedIn(request)).accountId, query.days === undefined ? 30 : Number(query.days)))
    .get("/console/api/requests/:id", async ({ request, params }) => views.requestUsage((await signedIn(request)).accountId, params.id))
    .get("/console/api/batches", async ({ request }) => views.batches((await signedIn(request)).accountId))
    .post("/console/api/batches/:id/cancel", async ({ request, params }) => views.cancelBatch((await signedIn(request)).accountId, params.id))
    .get("/console/api/files/:id/content", async ({ request, params }) => {
      const { file, name } = await views.fileContent((await signedIn(request)).accountId, params.id);
      return new Response(file, { headers: { "content-type": "application/octet-stream", "content-disposition": `attachment; filename="${name.replace(/["\\\r\n]/g, "_")}"` } });
    })
    .get("/console/api/gpus", async ({ request }) => (await signedIn(request), views.gpus()))
    .get("/console/api/rentals", async ({ request }) => views.rentals((await signedIn(request)).accountId))
    .post("/console/api/rentals/:id/stop", async ({ request, params }) => views.stopRental((await signedIn(request)).accountId, params.id))
    .get("/console/api/models", async ({ request }) => (await signedIn(request), views.models()))
    .get("/console/api/docs", async ({ request }) => (await signedIn(request), docList()))
    .get("/console/api/docs/:page", async ({ request, params }) => (await signedIn(request), docPage(params.page)))
    .get("/console/api/admin/accounts", async ({ request }) => {
      requireAdmin(await signedIn(request));
      return views.admin.accounts();
    })
    .post("/console/api/admin/accounts/:name/credit", async ({ request, params, body }) => {
      requireAdmin(await signedIn(request));
      return views.admin.credit(params.name, bodyOf(body));
    })
    // A model id with "/" comes percent-encoded (%2F) in one segment; the edge decodes it.
    .post("/console/api/admin/models/:id/load", async ({ request, params }) => {
      requireAdmin(await signedIn(request));
      return views.admin.loadModel(params.id);
    })
    .post("/console/api/admin/models/:id/unload", async ({ request, params }) => {
      requireAdmin(await signedIn(request));
      return views.admin.unloadModel(params.id);
    });
}
