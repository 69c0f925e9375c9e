// Every call to the gateway: the key as a header, errors turned into messages people can act on.
//
// A refusal (401, 403, 429) is also announced on `document` as a "gateway:refused" event, so
// the page shows it in one place and opens the key form on a 401; an accepted answer of a route
// that needs the key sends "gateway:accepted", which clears that notice.

import { getKey } from "./keys.js";

// The gateway's root, relative to the page (/playground/ -> /), so a reverse proxy that mounts
// the gateway under a prefix keeps working.
const ROOT = new URL("../", document.baseURI);

export class ApiError extends Error {
  constructor(status, message, { retryAfter = null, field = null, body = null } = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.retryAfter = retryAfter;
    this.field = field;
    this.body = body;
  }
}

export function apiUrl(path) {
  return new URL(path.replace(/^\//, ""), ROOT);
}

export async function request(path, { method = "GET", json, headers = {}, signal } = {}) {
  const sent = new Headers(headers);
  const key = getKey();
  if (key) sent.set("Authorization", `Bearer ${key}`);
  if (json !== undefined) sent.set("Content-Type", "application/json");
  let response;
  try {
    response = await fetch(apiUrl(path), {
      method,
      headers: sent,
      body: json === undefined ? undefined : JSON.stringify(json),
      signal,
      cache: "no-store",
      credentials: "omit",
      redirect: "error",
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "The gateway could not be reached (network error): is it still running?");
  }
  // /health needs no key, so its answer says nothing about the key.
  if (response.ok && path !== "/health") document.dispatchEvent(new CustomEvent("gateway:accepted"));
  return response;
}

// The ApiError for a response that is not ok, with the gateway's own message.
export async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  const { message, field } = describe(body, response);
  const retryAfter = response.headers.get("retry-after");
  const error = new ApiError(response.status, explain(response.status, message, retryAfter), {
    retryAfter, field, body,
  });
  if ([401, 403, 429].includes(response.status)) {
    document.dispatchEvent(new CustomEvent("gateway:refused", { detail: { status: response.status, message: error.message } }));
  }
  return error;
}

export async function requestJson(path, options = {}) {
  const response = await request(path, options);
  if (!response.ok) throw await failure(response);
  const data = response.status === 204 ? null : await response.json();
  return { data, response };
}

// X-Gateway-Added-Ms: how long the gateway itself took before the answer started.
export function gatewayAddedMs(response) {
  const value = Number.parseFloat(response.headers.get("x-gateway-added-ms") ?? "");
  return Number.isFinite(value) ? value : null;
}

function describe(body, response) {
  if (body && typeof body === "object") {
    if (body.error && typeof body.error.message === "string") {
      return { message: body.error.message, field: body.error.param ?? null };
    }
    if (typeof body.detail === "string") {
      // The marketplace names the field first: "user_id: user 7 not found".
      const named = /^([a-z_]+): /.exec(body.detail);
      return { message: body.detail, field: named ? named[1] : null };
    }
    if (Array.isArray(body.detail)) {
      const parts = body.detail.map((item) => {
        const where = (item.loc ?? []).filter((part) => !["body", "query", "path"].includes(part)).join(".");
        return where ? `${where}: ${item.msg}` : item.msg;
      });
      const first = body.detail[0]?.loc?.at?.(-1) ?? null;
      return { message: parts.join("; "), field: first };
    }
  }
  return { message: response.statusText || `HTTP ${response.status}`, field: null };
}

function explain(status, message, retryAfter) {
  switch (status) {
    case 401:
      return `The gateway needs a valid API key (401: ${message}). Enter one under “API key”.`;
    case 403:
      return `This API key may not do that (403: ${message}).`;
    case 429: {
      const wait = retryAfter ? ` Try again in ${retryAfter} s.` : " Try again shortly.";
      return `Too many requests (429: ${message}): the gateway is at its limit.${wait}`;
    }
    default:
      return `${message} (HTTP ${status})`;
  }
}
