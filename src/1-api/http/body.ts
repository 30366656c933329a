import { clientAddressOf, bindContext, setClientAddress, type RequestContext } from "./context";
import { ApiError } from "./errors";

// Request bodies and the size limit (server.max_body_mb). A body that announces its length is
// refused from the header (the edge's admit step); a chunked body announces none, so it is counted
// as it is read and refused in the API's envelope once it passes the limit — before Bun's own
// backstop (a bare, empty 413) is reached.

/** The 413 for a body of `size` bytes (announced), or for one found larger while it was read. */
export function bodyTooLarge(maxBytes: number, size?: number): ApiError {
  const what = size === undefined ? "request body is larger than" : `request body is ${size} bytes, over`;
  return new ApiError("payload_too_large", `${what} the limit of ${maxBytes} bytes (server.max_body_mb)`);
}

/** The request itself, or for a body without a length, a copy whose body stops at `maxBytes`. */
export function admitBody(req: Request, rc: RequestContext, maxBytes: number): Request {
  if (!req.body || req.headers.has("content-length")) return req;
  let seen = 0;
  const counted = req.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        seen += chunk.byteLength;
        if (seen <= maxBytes) return controller.enqueue(chunk);
        rc.bodyTooLarge = true;
        controller.error(bodyTooLarge(maxBytes));
      },
    }),
  );
  const copy = new Request(req.url, { method: req.method, headers: req.headers, body: counted, signal: req.signal, duplex: "half" } as RequestInit);
  bindContext(copy, rc);
  setClientAddress(copy, clientAddressOf(req) === "local" ? undefined : clientAddressOf(req));
  return copy;
}
