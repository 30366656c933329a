// Tiny JSON client for /console/api: cookie session + CSRF header + error-envelope parsing.

export const API_BASE = '/console/api';

/** Current session; filled from /login or /session. */
export const session = { account: null, csrf: null };

let unauthorized = () => {};
/** Register what to do when the server answers 401 not_signed_in. */
export function onUnauthorized(fn) { unauthorized = fn; }

export class ApiError extends Error {
  constructor(message, { status = 0, code = null, type = null, param = null } = {}) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.type = type;
    this.param = param;
  }
}

function fallbackMessage(status) {
  if (status === 401) return 'You are not signed in.';
  if (status === 403) return 'You do not have permission to do that.';
  if (status === 404) return 'Not found.';
  if (status === 429) return 'Too many requests. Please wait a moment and try again.';
  if (status >= 500) return `The server had a problem (HTTP ${status}). Please try again.`;
  return `Request failed (HTTP ${status}).`;
}

/** Turn a non-2xx Response with the {"error":{...}} envelope into an ApiError. */
export async function errorFromResponse(res) {
  let body = null;
  try { body = await res.json(); } catch { /* not JSON */ }
  const e = body && typeof body === 'object' ? body.error : null;
  if (typeof e === 'string' && e) return new ApiError(e, { status: res.status });
  const message = e && typeof e.message === 'string' && e.message ? e.message : fallbackMessage(res.status);
  return new ApiError(message, {
    status: res.status, code: e?.code ?? null, type: e?.type ?? null, param: e?.param ?? null,
  });
}

/**
 * The console API's request: `method` with a JSON body (and the CSRF token) unless a read; an
 * answer that is not 2xx is thrown as ApiError (and a 401 not_signed_in reported first).
 */
async function send(path, { method, body, signal, accept = 'application/json' }) {
  const headers = { Accept: accept };
  const init = { method, headers, credentials: 'same-origin', signal };
  if (method !== 'GET' && method !== 'HEAD') {
    headers['Content-Type'] = 'application/json';
    if (session.csrf) headers['X-CSRF-Token'] = session.csrf;
    init.body = JSON.stringify(body ?? {});
  }
  let res;
  try {
    res = await fetch(API_BASE + path, init);
  } catch (err) {
    if (err && err.name === 'AbortError') throw err;
    throw new ApiError('Could not reach the server. Check your connection and try again.');
  }
  if (!res.ok) {
    const err = await errorFromResponse(res);
    if (res.status === 401 && err.code === 'not_signed_in') unauthorized(err);
    throw err;
  }
  return res;
}

/**
 * api('/keys') or api('/keys', { method: 'POST', body: {...} }).
 * Non-GET requests carry the CSRF token and a JSON body. Throws ApiError on failure.
 */
export async function api(path, { method, body, signal } = {}) {
  const res = await send(path, { method: method || (body !== undefined ? 'POST' : 'GET'), body, signal });
  const text = await res.text();
  if (!text) return null;
  try { return JSON.parse(text); } catch { throw new ApiError('The server sent a response that could not be read.', { status: res.status }); }
}

/** Some endpoints wrap the object ({info}, {account}); accept either shape. */
export function unwrap(resp, field) {
  return resp && typeof resp === 'object' && resp[field] && typeof resp[field] === 'object' ? resp[field] : resp;
}

/**
 * POST a JSON body to the console's inference route (/console/api/v1/…: the API as the signed-in
 * account, no key in the page) and return the Response for streaming; throws ApiError on failure.
 */
export function apiRaw(path, body, signal) {
  return send(path, { method: 'POST', body, signal, accept: 'text/event-stream, application/json' });
}
