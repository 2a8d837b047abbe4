// Chat playground: pick a chat model, stream a reply. A cold model answers 503 `model_loading`: the loading
// state (phase, node, progress, ETA) shows inline and the request is retried by itself once the load ends.
// Only chat models (and their aliases) are offered; the last one picked is remembered in this browser.

import { api, sseEvents, stream } from "../api.js";
import { untilLoaded } from "../cold.js";
import { html, useEffect, useRef, useState } from "../lib.js";
import { loadLine } from "../load.js";
import { empty, option, toast } from "../ui.js";
import { pageHead } from "./common.js";

const MAX_TOKENS = 256;
const CHAT = "chat";
export const LAST_MODEL = "corral.chatModel"; // localStorage: a model name is not a secret

// The models (and aliases of models) that chat: an embedding, speech or image model is tried on the Models page.
// A frontend that does not list capabilities yet offers every model, as before.
export function chatModels({ models = [], aliases = {} }) {
  const chats = new Set(models.filter((m) => (m.capabilities || [CHAT]).includes(CHAT)).map((m) => m.name));
  return { names: [...chats], aliases: Object.keys(aliases).filter((a) => chats.has(aliases[a])) };
}

// The model to open on: the link's ?model= (the Models page's "Chat with it"), else the last one picked, else
// the first offered; only ever one that is offered.
export function initialModel(offered, wanted, last) {
  for (const name of [wanted, last]) if (name && offered.includes(name)) return name;
  return offered[0] || "";
}

function Bubble({ role, text, state, status }) {
  return html`<div class="bubble ${role}${state === "failed" ? " failed" : ""}" data-role=${role} data-state=${state}>
    <div class="bubble-text">${text}</div>${status ? html`<div class="bubble-status">${status}</div>` : null}</div>`;
}

export default function ChatPage() {
  const [offered, setOffered] = useState({ names: [], aliases: [] });
  const [model, setModel] = useState("");
  const [messages, setMessages] = useState([]); // {role, content, state, status}
  const [text, setText] = useState("");
  const [busy, setBusy] = useState(false);
  const controller = useRef(null);
  const log = useRef(null);
  const form = useRef(null);

  useEffect(() => {
    api("/api/models").then((m) => {
      const found = chatModels(m);
      setOffered(found);
      setModel(initialModel([...found.names, ...found.aliases], new URLSearchParams(location.search).get("model"),
        localStorage.getItem(LAST_MODEL)));
    }).catch((err) => toast(err.message, "danger"));
    return () => controller.current?.abort();
  }, []);
  useEffect(() => { if (log.current) log.current.scrollTop = log.current.scrollHeight; }, [messages]);

  const pick = (event) => {
    setModel(event.currentTarget.value);
    localStorage.setItem(LAST_MODEL, event.currentTarget.value);
  };
  const updateLast = (change) => setMessages((all) => [...all.slice(0, -1), { ...all.at(-1), ...change }]);

  const submit = async (event) => {
    event.preventDefault();
    const message = text.trim();
    if (!message || !model || busy) return;
    const history = [...messages.filter((m) => m.state !== "failed").map(({ role, content }) => ({ role, content })),
      { role: "user", content: message }];
    setMessages((all) => [...all, { role: "user", content: message, state: "done" }, { role: "assistant", content: "", state: "waiting" }]);
    setText("");
    setBusy(true);
    controller.current = new AbortController();
    const { signal } = controller.current;
    try {
      const response = await untilLoaded(() => stream("/v1/chat/completions", { method: "POST", signal,
        body: { model, messages: history, stream: true, max_tokens: MAX_TOKENS } }), {
        signal,
        onLoading: (body) => updateLast({ state: "loading", status: html`<p class="small muted">${body.error?.message || "loading…"}</p>
          ${body.loading ? loadLine(body.loading) : null}` }),
      });
      updateLast({ state: "streaming", status: null });
      let content = "";
      for await (const { data } of sseEvents(response)) {
        if (data === "[DONE]") break;
        try {
          content += JSON.parse(data).choices?.[0]?.delta?.content || "";
          updateLast({ content });
        } catch { /* a keepalive or a non-JSON line */ }
      }
      updateLast({ content, state: "done" });
    } catch (err) {
      if (err.name !== "AbortError") updateLast({ content: err.message, state: "failed", status: null });
    } finally {
      setBusy(false);
    }
  };
  const keydown = (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); form.current.requestSubmit(); }
  };
  return html`
    ${pageHead("Chat", "Try a model: replies stream as they are generated", html`<select name="model" aria-label="Model"
        data-testid="chat-model" value=${model} onChange=${pick}>
      ${offered.names.map((name) => option(name))}${offered.aliases.map((a) => option(a, `${a} (alias)`))}</select>`)}
    <section class="panel chat">
      <div class="chat-log" aria-live="polite" ref=${log}>
        ${messages.length ? messages.map((m, i) => html`<${Bubble} key=${i} role=${m.role} text=${m.content} state=${m.state} status=${m.status} />`)
          : empty("Pick a model and say something.")}</div>
      <form class="chat-input row" ref=${form} onSubmit=${submit}>
        <textarea name="message" rows="2" placeholder="Message…" aria-label="Message" required value=${text}
          onInput=${(e) => setText(e.currentTarget.value)} onKeyDown=${keydown}></textarea>
        <button type="submit" class="btn primary" disabled=${busy}>Send</button></form>
    </section>`;
}
