// Chat playground: pick a model, stream a reply. A cold model answers 503 `model_loading`: the loading
// state (phase, node, progress, ETA) shows inline and the request is retried by itself once the load ends.

import { api, sseEvents, stream } from "../api.js";
import { h } from "../dom.js";
import { onLive } from "../live.js";
import { empty, toast } from "../ui.js";
import { loadLine } from "./models.js";
import { pageHead } from "./common.js";

const RETRY_MIN_MS = 1000;
const RETRY_MAX_MS = 5000; // re-asked at least this often even if the load event is missed
const MAX_TOKENS = 256;

function bubble(role, text = "") {
  return h("div", { class: `bubble ${role}`, dataset: { role } }, h("div", { class: "bubble-text" }, text));
}

export default function chatPage(root) {
  const history = [];
  const select = h("select", { name: "model", "aria-label": "Model", dataset: { testid: "chat-model" } });
  const log = h("div", { class: "chat-log", "aria-live": "polite" }, empty("Pick a model and say something."));
  const input = h("textarea", { name: "message", rows: 2, placeholder: "Message…", "aria-label": "Message", required: true });
  const send = h("button", { type: "submit", class: "btn primary" }, "Send");
  const form = h("form", { class: "chat-input row" }, input, send);
  let controller = null;
  let loadEnded = null; // resolves when a load event arrives (a hint to retry at once)
  const offLive = onLive((event) => { if (event.kind === "load" && loadEnded) loadEnded(); });

  api("/api/models").then((m) => {
    select.replaceChildren(...m.models.map((x) => h("option", { value: x.name }, x.name)),
      ...Object.keys(m.aliases || {}).map((a) => h("option", { value: a }, `${a} (alias)`)));
  }).catch((err) => toast(err.message, "danger"));

  async function ask(reply) {
    const text = reply.querySelector(".bubble-text");
    const status = h("div", { class: "bubble-status" });
    reply.append(status);
    let delay = RETRY_MIN_MS;
    for (;;) {
      controller = new AbortController();
      const response = await stream("/v1/chat/completions", { method: "POST", signal: controller.signal,
        body: { model: select.value, messages: history, stream: true, max_tokens: MAX_TOKENS } });
      if (response.status === 503) {
        const body = await response.json().catch(() => ({}));
        if (body.error?.code === "model_loading" || body.loading) {
          status.replaceChildren(h("p", { class: "small muted" }, body.error?.message || "loading…"),
            body.loading ? loadLine(body.loading) : null);
          reply.dataset.state = "loading";
          const retryAfter = Number(response.headers.get("Retry-After")) * 1000 || RETRY_MAX_MS;
          await new Promise((resolve) => {
            loadEnded = resolve;
            setTimeout(resolve, Math.min(retryAfter, Math.max(delay, RETRY_MIN_MS), RETRY_MAX_MS));
          });
          loadEnded = null;
          delay = Math.min(delay * 2, RETRY_MAX_MS);
          continue;
        }
        throw new Error(body.error?.message || "the model is unavailable");
      }
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        throw new Error(body.error?.message || `${response.status} ${response.statusText}`);
      }
      status.remove();
      reply.dataset.state = "streaming";
      let content = "";
      for await (const { data } of sseEvents(response)) {
        if (data === "[DONE]") break;
        try {
          const chunk = JSON.parse(data);
          content += chunk.choices?.[0]?.delta?.content || "";
          text.textContent = content;
          log.scrollTop = log.scrollHeight;
        } catch { /* a keepalive or a non-JSON line */ }
      }
      reply.dataset.state = "done";
      return content;
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const message = input.value.trim();
    if (!message || !select.value) return;
    if (!history.length) log.replaceChildren();
    history.push({ role: "user", content: message });
    log.append(bubble("user", message));
    const reply = bubble("assistant");
    log.append(reply);
    input.value = "";
    send.disabled = true;
    try {
      history.push({ role: "assistant", content: await ask(reply) });
    } catch (err) {
      if (err.name !== "AbortError") {
        reply.dataset.state = "failed";
        reply.querySelector(".bubble-text").textContent = err.message;
        reply.classList.add("failed");
        history.pop();
      }
    } finally {
      send.disabled = false;
    }
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); form.requestSubmit(); }
  });
  root.append(pageHead("Chat", "Try a model: replies stream as they are generated", select),
    h("section", { class: "panel chat" }, log, form));
  return () => { offLive(); if (controller) controller.abort(); if (loadEnded) loadEnded(); };
}
