// A node-selector field ("key=value,key=value") that completes the label keys and values the cluster
// reports (GET /api/nodes/labels). Suggestions are a listbox under the input: click or ↑/↓ + Enter.

import { h } from "./dom.js";

const SUGGESTIONS_MAX = 12;

function current(text, caret) {
  const start = text.lastIndexOf(",", caret - 1) + 1;
  let end = text.indexOf(",", caret);
  if (end < 0) end = text.length;
  return { start, end, part: text.slice(start, end).trimStart() };
}

// `labels()` answers the current catalog {key: [values]}: it may still be loading when the field opens.
export function selectorField(labels, { value = "", name = "node_selector" } = {}) {
  const input = h("input", { name, value, autocomplete: "off", placeholder: "e.g. gpu=nvidia,zone=eu-1", role: "combobox",
    "aria-autocomplete": "list", "aria-expanded": "false", "aria-label": "Node selector", dataset: { testid: "selector" } });
  const list = h("ul", { class: "suggestions", role: "listbox", hidden: true });
  let options = [];
  let active = -1;

  const choose = (option) => {
    const { start, end } = current(input.value, input.selectionStart ?? input.value.length);
    const before = input.value.slice(0, start);
    const after = input.value.slice(end);
    input.value = before + option.text + after;
    const caret = (before + option.text).length;
    input.setSelectionRange(caret, caret);
    input.focus();
    update();
  };
  function update() {
    const { part } = current(input.value, input.selectionStart ?? input.value.length);
    const catalog = labels() || {};
    const eq = part.indexOf("=");
    if (eq < 0) {
      options = Object.keys(catalog).filter((k) => k.startsWith(part)).map((k) => ({ text: `${k}=`, label: k, kind: "key" }));
    } else {
      const key = part.slice(0, eq);
      const typed = part.slice(eq + 1);
      options = (catalog[key] || []).filter((v) => v.startsWith(typed) && v !== typed)
        .map((v) => ({ text: `${key}=${v}`, label: v, kind: "value" }));
    }
    options = options.slice(0, SUGGESTIONS_MAX);
    active = -1;
    list.replaceChildren(...options.map((o, i) => h("li", {
      role: "option", class: `suggestion ${o.kind}`, dataset: { testid: "suggestion", value: o.label },
      onmousedown: (event) => { event.preventDefault(); choose(options[i]); },
    }, o.label, h("span", { class: "muted small" }, o.kind === "key" ? " label" : " value"))));
    const open = options.length > 0 && document.activeElement === input;
    list.hidden = !open;
    input.setAttribute("aria-expanded", String(open));
  }
  input.addEventListener("input", update);
  input.addEventListener("focus", update);
  input.addEventListener("click", update);
  input.addEventListener("blur", () => { list.hidden = true; input.setAttribute("aria-expanded", "false"); });
  input.addEventListener("keydown", (event) => {
    if (list.hidden || !options.length) return;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      active = (active + (event.key === "ArrowDown" ? 1 : options.length - 1)) % options.length;
      [...list.children].forEach((li, i) => li.classList.toggle("active", i === active));
    } else if (event.key === "Enter" && active >= 0) {
      event.preventDefault();
      choose(options[active]);
    } else if (event.key === "Escape") {
      list.hidden = true;
    }
  });
  return { el: h("div", { class: "complete" }, input, list), input };
}

// "a=b, c=d" → {a: "b", c: "d"}; throws naming the piece that is not key=value.
export function parseSelector(text) {
  const out = {};
  for (const piece of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const eq = piece.indexOf("=");
    if (eq <= 0) throw new Error(`node selector: "${piece}" is not key=value`);
    out[piece.slice(0, eq).trim()] = piece.slice(eq + 1).trim();
  }
  return out;
}

export function selectorText(selector) {
  if (!selector) return "";
  const obj = typeof selector === "string" ? JSON.parse(selector || "{}") : selector;
  return Object.entries(obj).map(([k, v]) => `${k}=${v}`).join(",");
}
