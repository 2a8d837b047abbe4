// Live hints from GET /api/events: an event says *what* changed; pages re-read the API for it.
// Reconnects with a capped, jittered backoff; a `resync` (or a reconnect) tells every page to re-read all.

import { session, sseEvents, stream } from "./api.js";

const listeners = new Set();
let controller = null;
let status = "offline";
const statusListeners = new Set();

function setStatus(next) {
  status = next;
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

function emit(event) {
  for (const fn of listeners) {
    try { fn(event); } catch (err) { console.error("live listener failed", err); }
  }
}

export function startLive() {
  stopLive();
  controller = new AbortController();
  const { signal } = controller;
  (async () => {
    let delay = 500;
    while (!signal.aborted && session.key) {
      try {
        const response = await stream("/api/events", { signal });
        if (!response.ok) throw new Error(`events: ${response.status}`);
        setStatus("live");
        emit({ kind: "resync" });
        delay = 500;
        for await (const { event, data } of sseEvents(response)) {
          if (event === "hello") continue;
          let payload = { kind: event };
          try { payload = JSON.parse(data); } catch { /* a hint without fields */ }
          emit(payload);
        }
      } catch (err) {
        if (signal.aborted) return;
      }
      setStatus("reconnecting");
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
