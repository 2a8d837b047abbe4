// A call to a model that may be cold. The frontend answers 503 `model_loading` (with the load's phase, node,
// progress and ETA) when the load outlasts its wait budget: the caller is told, and the request is sent again by
// itself once a load event arrives or Retry-After has passed. Any other failure is an ApiError with the server's
// own message.

import { ApiError, errorOf } from "./api.js";
import { onLive } from "./live.js";

const RETRY_MIN_MS = 1000;
const RETRY_MAX_MS = 5000; // re-asked at least this often even if the load event is missed

// Resolves after `ms`, or at once when a load ends (a live `load` event); rejects with an AbortError on `signal`.
function pause(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) { reject(new DOMException("aborted", "AbortError")); return; }
    let off = () => {};
    const done = (fn) => () => { clearTimeout(timer); off(); signal?.removeEventListener("abort", aborted); fn(); };
    const resumed = done(resolve);
    const aborted = done(() => reject(new DOMException("aborted", "AbortError")));
    const timer = setTimeout(resumed, ms);
    off = onLive((event) => { if (event.kind === "load") resumed(); });
    signal?.addEventListener("abort", aborted);
  });
}

// `send()` makes one attempt and answers its fetch Response; `onLoading(body)` sees each 503 `model_loading` body.
// Answers the first successful Response (its body unread).
export async function untilLoaded(send, { onLoading = () => {}, signal } = {}) {
  let delayMs = RETRY_MIN_MS;
  for (;;) {
    const response = await send();
    if (response.ok) return response;
    if (response.status !== 503) throw await errorOf(response);
    const body = await response.json().catch(() => ({}));
    if (body.error?.code !== "model_loading" && !body.loading) {
      throw new ApiError(503, body.error?.message || "the model is unavailable");
    }
    onLoading(body);
    const retryAfterMs = Number(response.headers.get("Retry-After")) * 1000 || RETRY_MAX_MS;
    await pause(Math.min(retryAfterMs, delayMs, RETRY_MAX_MS), signal);
    delayMs = Math.min(delayMs * 2, RETRY_MAX_MS);
  }
}
