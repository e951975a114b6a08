// The REST API, by relative URL: the page lives at <root>/ui/, the API at <root>/api/, so the
// viewer also works behind a proxy that mounts the gateway under a prefix.

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

/** GET a JSON document; errors carry the gateway's message (OpenAI error JSON). */
export async function get(path, params = {}, signal = undefined) {
  const response = await fetch(apiUrl(path, params), { signal, headers: { accept: "application/json" } });
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
