import assert from "node:assert/strict";
import { test } from "node:test";
import { installDom, settle } from "./dom.js";

installDom();
const { html, render } = await import("../../src/corral/frontend/ui/js/lib.js");
const ui = await import("../../src/corral/frontend/ui/js/ui.js");
const { suggestions } = await import("../../src/corral/frontend/ui/js/complete.js");
const { chatModels, initialModel } = await import("../../src/corral/frontend/ui/js/pages/chat.js");

function mount(vnode) {
  const host = document.createElement("div");
  document.body.append(host);
  render(vnode, host);
  return host;
}

test("a pill carries its status and tone; a bar its clamped value", () => {
  const host = mount(html`<div>${ui.pill("healthy")}${ui.bar(140, { label: "disk" })}</div>`);
  const pill = host.querySelector(".pill");
  assert.equal(pill.className, "pill ok");
  assert.equal(pill.dataset.status, "healthy");
  assert.equal(pill.textContent, "healthy");
  const bar = host.querySelector("[role=progressbar]");
  assert.equal(bar.getAttribute("aria-valuenow"), "140");
  assert.equal(bar.querySelector(".bar-fill").style.width, "100.0%");
});

test("API data is text, never markup", () => {
  const host = mount(ui.panel("<b>x</b>", ui.empty("<img src=x onerror=alert(1)>")));
  assert.equal(host.querySelector("img"), null);
  assert.equal(host.querySelector("h2").textContent, "<b>x</b>");
});

test("an action button is disabled while it runs and shows its failure as a toast", async () => {
  let finish;
  const host = mount(ui.action("Go", () => new Promise((resolve, reject) => { finish = reject; }), { testid: "go" }));
  const button = host.querySelector("[data-testid=go]");
  button.click();
  await settle();
  assert.equal(button.disabled, true);
  finish(new Error("the server said no"));
  await settle();
  assert.equal(button.disabled, false);
  assert.equal(document.querySelector(".toasts .toast.danger").textContent, "the server said no");
});

test("a destructive action runs only once confirmed in the dialog", async () => {
  let runs = 0;
  const host = mount(ui.dangerAction("Delete", "Delete the rule for sim?", async () => { runs += 1; }));
  const dialogButton = (name) => [...document.querySelectorAll("dialog button")].find((b) => b.textContent === name);
  host.querySelector("button").click();
  await settle();
  assert.equal(document.querySelector("dialog p").textContent, "Delete the rule for sim?");
  dialogButton("Cancel").click();
  await settle();
  assert.equal(runs, 0);
  assert.equal(document.querySelector("dialog"), null);
  host.querySelector("button").click();
  await settle();
  dialogButton("Delete").click();
  await settle();
  assert.equal(runs, 1);
});

test("an option keeps its value as an attribute even when it equals its text", () => {
  const host = mount(html`<select>${ui.option("sim")}${ui.option("assistant", "assistant (alias)")}</select>`);
  assert.deepEqual([...host.querySelectorAll("option")].map((o) => o.getAttribute("value")), ["sim", "assistant"]);
});

test("the selector field completes keys, then the values of the key typed", () => {
  const catalog = { gpu: ["sim", "nvidia"], zone: ["eu-1", "us-2"] };
  assert.deepEqual(suggestions(catalog, "zo").map((o) => o.text), ["zone="]);
  assert.deepEqual(suggestions(catalog, "gpu=sim,zone=").map((o) => o.label), ["eu-1", "us-2"]);
  assert.deepEqual(suggestions(catalog, "zone=eu-1"), []); // complete: nothing left to offer
  assert.deepEqual(suggestions(catalog, "gpu=n,zone=eu-1", 5).map((o) => o.text), ["gpu=nvidia"]); // at the caret
});

test("chat offers only chat models and their aliases, opening on the link's or the last one", () => {
  const listed = { models: [{ name: "sim", capabilities: ["chat"] }, { name: "embedder", capabilities: ["embeddings"] },
    { name: "old" }], aliases: { assistant: "sim", vectors: "embedder" } };
  assert.deepEqual(chatModels(listed), { names: ["sim", "old"], aliases: ["assistant"] });
  const offered = ["sim", "old", "assistant"];
  assert.equal(initialModel(offered, "assistant", "old"), "assistant");
  assert.equal(initialModel(offered, null, "old"), "old");
  assert.equal(initialModel(offered, "embedder", "gone"), "sim");
  assert.equal(initialModel([], null, null), "");
});
