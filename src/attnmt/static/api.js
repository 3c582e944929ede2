// The JSON API of `attnmt serve`: one fetch helper, whose failures are ApiErrors with the server's detail.

export class ApiError extends Error {
  constructor(status, detail, what) {
    super(`${what}: ${status ? `HTTP ${status} — ` : ""}${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

/** GET `path` (no body) or POST `body` as JSON; the answer's JSON, or an ApiError named `what`. */
export async function api(path, body, what = path) {
  let response;
  try {
    response = await fetch(path, body === undefined ? {} : {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, `the server cannot be reached (${err.message})`, what);
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON: handled below */ }
  if (!response.ok) {
    let detail = data && data.detail !== undefined ? data.detail : text || response.statusText;
    if (typeof detail !== "string") detail = JSON.stringify(detail);
    throw new ApiError(response.status, detail, what);
  }
  if (data === null) throw new ApiError(response.status, "the answer is not JSON", what);
  return data;
}
