// The operator API as a page calls it (docs/operator-api.md): one request to a space's API,
// its JSON answer, or an Error carrying the HTTP status and the API's error code. The console
// (app.js) and the signed-link page (link.js) each say which headers speak for the person.

/** `method` on `/api/spaces/<space>/<path>` with `headers`; `body`, when given, sent as JSON. */
export async function apiCall(space, headers, method, path, body) {
  const res = await fetch(`/api/spaces/${encodeURIComponent(space)}/${path}`, {
    method,
    headers: { ...headers, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let data;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    data = undefined;
  }
  if (!res.ok) {
    const err = new Error(data?.error?.message || `HTTP ${res.status}`);
    err.status = res.status;
    err.code = data?.error?.code;
    throw err;
  }
  return data;
}
