// Chat playground: pick a chat model, stream a reply. A cold model answers 503 `model_loading`: the loading
// state (phase, node, progress, ETA) shows inline and the request is retried by itself once the load ends.

import { api, sseEvents, stream } from "../api.js";
import { untilLoaded } from "../cold.js";
import { h } from "../dom.js";
import { loadLine } from "../load.js";
import { empty, toast } from "../ui.js";
import { pageHead } from "./common.js";

const MAX_TOKENS = 256;
const CHAT = "chat";

// The models (and aliases of models) that chat: an embedding, speech or image model is tried on the Models page.
// A frontend that does not list capabilities yet offers every model, as before.
export function chatModels({ models = [], aliases = {} }) {
  const chats = new Set(models.filter((m) => (m.capabilities || [CHAT]).includes(CHAT)).map((m) => m.name));
  return { names: [...chats], aliases: Object.keys(aliases).filter((a) => chats.has(aliases[a])) };
}

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

  api("/api/models").then((m) => {
    const { names, aliases } = chatModels(m);
    select.replaceChildren(...names.map((name) => h("option", { value: name }, name)),
      ...aliases.map((a) => h("option", { value: a }, `${a} (alias)`)));
    const wanted = new URLSearchParams(location.search).get("model"); // "Chat" on the Models page links here
    if (wanted && [...names, ...aliases].includes(wanted)) select.value = wanted;
  }).catch((err) => toast(err.message, "danger"));

  async function ask(reply) {
    const text = reply.querySelector(".bubble-text");
    const status = h("div", { class: "bubble-status" });
    reply.append(status);
    controller = new AbortController();
    const { signal } = controller;
    const response = await untilLoaded(() => stream("/v1/chat/completions", { method: "POST", signal,
      body: { model: select.value, messages: history, stream: true, max_tokens: MAX_TOKENS } }), {
      signal,
      onLoading: (body) => {
        status.replaceChildren(h("p", { class: "small muted" }, body.error?.message || "loading…"),
          body.loading ? loadLine(body.loading) : null);
        reply.dataset.state = "loading";
      },
    });
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
  return () => { if (controller) controller.abort(); };
}
