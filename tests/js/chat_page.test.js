import assert from "node:assert/strict";
import { test } from "node:test";
import { installDom, settle } from "./dom.js";

installDom("http://localhost/app/chat");
const { html, render } = await import("../../src/corral/frontend/ui/js/lib.js");
const { default: ChatPage, LAST_MODEL } = await import("../../src/corral/frontend/ui/js/pages/chat.js");

const MODELS = {
  models: [{ name: "sim", capabilities: ["chat"] }, { name: "other", capabilities: ["chat", "tts"] },
    { name: "embedder", capabilities: ["embeddings"] }],
  aliases: { assistant: "sim", vectors: "embedder" },
};
globalThis.fetch = async (path) => {
  assert.equal(path, "/api/models");
  return new Response(JSON.stringify(MODELS), { status: 200 });
};

async function mountChat() {
  const host = document.createElement("div");
  document.body.append(host);
  render(html`<${ChatPage} params=${[]} />`, host);
  await settle();
  return { host, select: host.querySelector("[data-testid=chat-model]"), unmount: () => render(null, host) };
}

test("the Chat page offers chat models and their aliases, and remembers the one picked", async () => {
  localStorage.removeItem(LAST_MODEL);
  const first = await mountChat();
  assert.deepEqual([...first.select.options].map((o) => o.value), ["sim", "other", "assistant"]);
  assert.equal(first.select.value, "sim");
  first.select.value = "other";
  first.select.dispatchEvent(new Event("change", { bubbles: true }));
  await settle();
  assert.equal(localStorage.getItem(LAST_MODEL), "other");
  first.unmount();
  const again = await mountChat();
  assert.equal(again.select.value, "other");
  again.unmount();
});
