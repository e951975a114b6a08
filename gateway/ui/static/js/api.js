// The REST API, by relative URL: the page lives at <root>/ui/, the API at <root>/api/, so the
// viewer also works behind a proxy that mounts the gateway under a prefix.
//
// Every /api read needs the gateway's admin key. The page asks for it once (or takes it from a
// `#key=...` fragment, which `harnessrl serve` prints and which never reaches a server), keeps it
// in sessionStorage (this tab only) and sends it as x-admin-key on every request.

const KEY_ITEM = "harnessrl.adminKey";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function apiUrl(path, params) {
  const url = new URL(`../api/${path.replace(/^\//, "")}`, document.baseURI);
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== "") url.searchParams.set(key, value);
  }
  return url;
}

/** The admin key this tab holds ("" when none yet). */
export function adminKey() {
  return sessionStorage.getItem(KEY_ITEM) || "";
}

export function setAdminKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
}

/**
 * Moves a `#key=K` (or `#key=K&/route`) fragment into sessionStorage and out of the address bar,
 * so the key stays in neither the history nor a copied link; returns the route that remains.
 */
export function takeKeyFromUrl() {
  const match = location.hash.match(/^#key=([^&]*)(?:&(.*))?$/);
  if (!match) return;
  setAdminKey(decodeURIComponent(match[1]));
  history.replaceState(null, "", `${location.pathname}${location.search}#${match[2] || "/runs"}`);
}

/** GET a JSON document; errors carry the gateway's message (OpenAI error JSON). */
export async function get(path, params = {}, signal = undefined) {
  const headers = { accept: "application/json" };
  const key = adminKey();
  if (key) headers["x-admin-key"] = key;
  const response = await fetch(apiUrl(path, params), { signal, headers });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      message = body?.error?.message || body?.detail || message;
    } catch { /* not JSON: keep the status line */ }
    throw new ApiError(response.status, `GET ${path}: ${message}`);
  }
  return response.json();
}

/**
 * A keyset-paged listing: each next() returns the following page's rows ({data, next_cursor}).
 * Listings are never read whole; views ask for one more page when the user wants it.
 */
export function pager(path, params, signal, limit = 50) {
  let cursor; // undefined: before the first page; null: after the last one (0 is a valid cursor)
  return {
    get done() { return cursor === null; },
    async next() {
      if (cursor === null) return [];
      const page = await get(path, { ...params, after: cursor, limit }, signal);
      cursor = page.next_cursor;
      return page.data;
    },
  };
}
