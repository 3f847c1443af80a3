// The service's API as the page uses it: JSON calls with the bearer token, and the
// server-sent event stream read with fetch (EventSource cannot send the Authorization
// header, and the page gets no other way in than the API's).

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

function detailText(body, fallback) {
  // {"detail": "..."} or FastAPI's [{"loc": [...], "msg": "..."}, ...]
  if (!body || body.detail === undefined) return fallback;
  if (typeof body.detail === "string") return body.detail;
  return body.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
}

export async function call(token, path, { method = "GET", body, headers = {} } = {}) {
  const init = { method, headers: { Authorization: `Bearer ${token}`, ...headers } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const answer = await fetch(path, init);
  const text = await answer.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch (_) {
    parsed = null;
  }
  if (!answer.ok) throw new ApiError(answer.status, detailText(parsed, answer.statusText));
  return parsed;
}

export function randomKey() {
  // an Idempotency-Key; getRandomValues works on plain HTTP too (randomUUID does not)
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return "ui-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export async function openEvents(token, signal) {
  // the response of GET /v1/events (throws ApiError unless 200)
  const answer = await fetch("/v1/events", {
    headers: { Authorization: `Bearer ${token}`, Accept: "text/event-stream" },
    signal,
    cache: "no-store",
  });
  if (!answer.ok || !answer.body) throw new ApiError(answer.status, answer.statusText);
  return answer;
}

export async function readEvents(body, signal, onEvent) {
  // calls onEvent({kind, data}) for each event until the stream ends
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  while (!signal.aborted) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = parseEvent(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (event) onEvent(event);
    }
  }
}

function parseEvent(block) {
  // one SSE block: "event:" and "data:" lines (comments and ids ignored)
  let kind = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") kind = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  try {
    return { kind, data: JSON.parse(data.join("\n")) };
  } catch (_) {
    return null;
  }
}
