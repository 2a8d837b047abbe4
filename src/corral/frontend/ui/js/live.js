// Live hints from GET /api/events: an event says *what* changed; pages re-read the API for it.
// Reconnects with a capped, jittered backoff; a `resync` (or a reconnect) tells every page to re-read all.
// The status says what the badge waits for when it is not live: {state: live | connecting | reconnecting |
// offline, text}.

import { session, sseEvents, stream } from "./api.js";
import { useEffect, useRef, useState } from "./lib.js";

const EVENTS = "/api/events";
const listeners = new Set();
const statusListeners = new Set();
let controller = null;
let status = { state: "offline", text: "waiting for login" };

export function statusText(state, detail = "") {
  switch (state) {
    case "live": return "live";
    case "connecting": return `connecting to ${EVENTS}…`;
    case "reconnecting": return `reconnecting to ${EVENTS}…${detail ? ` (${detail})` : ""}`;
    default: return "waiting for login";
  }
}

function setStatus(state, detail) {
  status = { state, text: statusText(state, detail) };
  for (const fn of statusListeners) fn(status);
}

export function onLive(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

export function onLiveStatus(fn) {
  statusListeners.add(fn);
  fn(status);
  return () => statusListeners.delete(fn);
}

export function emit(event) {
  for (const fn of listeners) {
    try { fn(event); } catch (err) { console.error("live listener failed", err); }
  }
}

// One event's payload: its JSON data, or just its kind when the data is not JSON.
export function payloadOf({ event, data }) {
  try {
    const body = JSON.parse(data);
    return body && typeof body === "object" ? body : { kind: event };
  } catch {
    return { kind: event };
  }
}

export function startLive() {
  stopLive();
  controller = new AbortController();
  const { signal } = controller;
  setStatus("connecting");
  (async () => {
    let delay = 500;
    while (!signal.aborted && session.key) {
      let why;
      try {
        const response = await stream(EVENTS, { signal });
        if (response.status === 401 && session.verified) { // the key was revoked: no retry can succeed
          session.onLogout("The admin key was refused: log in again.");
          return;
        }
        if (!response.ok) throw new Error(`${response.status}`);
        setStatus("live");
        emit({ kind: "resync" });
        delay = 500;
        for await (const message of sseEvents(response)) {
          if (message.event !== "hello") emit(payloadOf(message));
        }
        why = "the stream ended";
      } catch (err) {
        if (signal.aborted) return;
        why = err.message || String(err);
      }
      setStatus("reconnecting", why);
      await new Promise((resolve) => setTimeout(resolve, delay + Math.random() * delay));
      delay = Math.min(delay * 2, 10000);
    }
  })();
}

export function stopLive() {
  if (controller) controller.abort();
  controller = null;
  setStatus("offline");
}

// Re-run `refresh` when an event of one of `kinds` arrives (debounced), and every `everyMs` as a fallback.
export function follow(kinds, refresh, { everyMs = 0, debounceMs = 250 } = {}) {
  let timer = null;
  const kick = () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, debounceMs);
  };
  const off = onLive((event) => {
    if (event.kind === "resync" || kinds.includes(event.kind)) kick();
  });
  const interval = everyMs ? setInterval(refresh, everyMs) : null;
  return () => { off(); clearTimeout(timer); if (interval) clearInterval(interval); };
}

// follow() for a component's life; `refresh` may change between renders (the latest one runs).
export function useFollow(kinds, refresh, options = {}) {
  const latest = useRef(refresh);
  latest.current = refresh;
  useEffect(() => follow(kinds, () => latest.current(), options), []); // eslint-disable-line react-hooks/exhaustive-deps -- at mount
}

export function useLiveStatus() {
  const [value, setValue] = useState(status);
  useEffect(() => onLiveStatus(setValue), []);
  return value;
}
