// The HTTP client: JSON in and out, the session cookie plus its CSRF header, one error type.

const CSRF_COOKIE = "parley_csrf";
const UNSAFE = new Set(["POST", "PUT", "PATCH", "DELETE"]);

/** An answer that is not 2xx, or no answer at all (status 0). */
export class ApiError extends Error {
  constructor(status, detail, headers) {
    super(detail.message || `request failed (${status})`);
    this.name = "ApiError";
    this.status = status;
    this.code = detail.code || "error";
    this.param = detail.param || null;
    this.retryAfter = retryAfterSeconds(headers) ?? detail.retry_after ?? null;
    // how to space retries after the first (a 429/503's tier guidance, see banner.js)
    this.backoff = detail.backoff || null;
    this.headers = headers;
  }

  get retryable() {
    return this.status === 0 || this.status === 429 || this.status === 503;
  }
}

function retryAfterSeconds(headers) {
  const value = headers && headers.get("Retry-After");
  if (!value) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, (date - Date.now()) / 1000);
}

function csrfToken() {
  for (const part of document.cookie.split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === CSRF_COOKIE) return decodeURIComponent(rest.join("="));
  }
  return null;
}

/** A random key for Idempotency-Key (works on plain http too, unlike randomUUID). */
export function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Send a request; resolves to the Response when it is 2xx, else throws ApiError. */
export async function send(method, path, { json, body, headers = {}, signal, accept } = {}) {
  const init = { method, headers: { ...headers }, signal, credentials: "same-origin" };
  init.headers.Accept = accept || "application/json";
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  } else if (body !== undefined) {
    init.headers["Content-Type"] = "application/octet-stream";
    init.body = body; // a File: sent as it is
  }
  if (UNSAFE.has(method)) {
    const token = csrfToken();
    if (token) init.headers["X-CSRF-Token"] = token;
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, { code: "network_error", message: "cannot reach the server" }, null);
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

async function errorOf(response) {
  let detail = { message: `${response.status} ${response.statusText}`.trim() };
  try {
    const body = await response.json();
    if (body && body.error) detail = body.error;
  } catch {
    // not JSON (a proxy's page, say): keep the status line
  }
  return new ApiError(response.status, detail, response.headers);
}

/** Send and parse the JSON answer (null for 204). */
export async function api(method, path, options) {
  const response = await send(method, path, options);
  if (response.status === 204) return null;
  return response.json();
}

export const apiGet = (path, options) => api("GET", path, options);
