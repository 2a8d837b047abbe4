// Every call to the frontend's API: the admin key (this tab's sessionStorage only) as a bearer token,
// errors turned into readable messages, and routes that are not there yet reported as "absent".

const KEY_ITEM = "corral.adminKey";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export const session = {
  get key() { return sessionStorage.getItem(KEY_ITEM) || ""; },
  set key(value) {
    if (value) sessionStorage.setItem(KEY_ITEM, value);
    else sessionStorage.removeItem(KEY_ITEM);
  },
  verified: false, // set once the key was accepted: a 401 after that means it was revoked
  onLogout: () => {},
};

function headers(extra = {}) {
  return { Authorization: `Bearer ${session.key}`, ...extra };
}

// The server's own message for a failed response (the OpenAI envelope's error.message, a detail, or the status).
export async function errorOf(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    const error = body.error ?? body.detail ?? body;
    message = typeof error === "string" ? error : error.message || JSON.stringify(error);
  } catch { /* not JSON: keep the status line */ }
  return new ApiError(response.status, message);
}

// fetch with the key; JSON in and out. `body` may be an object (sent as JSON) or a string (sent as is).
export async function api(path, { method = "GET", body, type, signal } = {}) {
  const init = { method, signal, headers: headers() };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    init.headers["Content-Type"] = type || "application/json";
  }
  const response = await fetch(path, init);
  if (response.status === 401 && session.verified) {
    session.onLogout("The admin key was refused: log in again.");
    throw new ApiError(401, "the admin key was refused");
  }
  if (response.status === 401) throw new ApiError(401, "the admin key was refused");
  if (!response.ok) throw await errorOf(response);
  if (response.status === 204) return null;
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

// A route another part of corral may not have yet: null when it answers 404/405 for the route itself.
export async function optional(path) {
  try {
    return await api(path);
  } catch (err) {
    if (err.status === 404 || err.status === 405) return null;
    throw err;
  }
}

// A raw request whose answer the caller reads itself (a stream, audio bytes): the body may be an object (sent as
// JSON) or FormData (a multipart upload; the browser sets its boundary).
export async function request(path, { method = "GET", body, accept, signal } = {}) {
  const init = { method, signal, headers: headers(accept ? { Accept: accept } : {}) };
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  return fetch(path, init);
}

// A raw streaming request (chat, events): the caller reads response.body.
export function stream(path, { method = "GET", body, signal } = {}) {
  return request(path, { method, body, signal, accept: "text/event-stream" });
}

// Cuts complete server-sent events off the front of `buffer`: {events: [{event, data}], rest} (the rest waits
// for more bytes). An event without data lines (a comment, a keepalive) is dropped.
export function parseSse(buffer) {
  const events = [];
  let cut;
  buffer = buffer.replace(/\r\n?/g, "\n");
  while ((cut = buffer.indexOf("\n\n")) >= 0) {
    const block = buffer.slice(0, cut);
    buffer = buffer.slice(cut + 2);
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (data.length) events.push({ event, data: data.join("\n") });
  }
  return { events, rest: buffer };
}

// Server-sent events from a fetch body (EventSource cannot send the Authorization header).
export async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      const { events, rest } = parseSse(buffer + decoder.decode(value, { stream: true }));
      buffer = rest;
      yield* events;
    }
  } finally {
    reader.releaseLock();
  }
}

export const enc = encodeURIComponent;
