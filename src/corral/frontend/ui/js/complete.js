// A node-selector field ("key=value,key=value") that completes the label keys and values the cluster
// reports (GET /api/nodes/labels). Suggestions are a listbox under the input: click or ↑/↓ + Enter.

import { html, useRef, useState } from "./lib.js";

const SUGGESTIONS_MAX = 12;

function current(text, caret) {
  const start = text.lastIndexOf(",", caret - 1) + 1;
  let end = text.indexOf(",", caret);
  if (end < 0) end = text.length;
  return { start, end, part: text.slice(start, end).trimStart() };
}

// The suggestions for the piece of `text` at `caret`, from the catalog {key: [values]}.
export function suggestions(catalog, text, caret = text.length) {
  const { part } = current(text, caret);
  const eq = part.indexOf("=");
  let options;
  if (eq < 0) {
    options = Object.keys(catalog).filter((k) => k.startsWith(part)).map((k) => ({ text: `${k}=`, label: k, kind: "key" }));
  } else {
    const key = part.slice(0, eq);
    const typed = part.slice(eq + 1);
    options = (catalog[key] || []).filter((v) => v.startsWith(typed) && v !== typed)
      .map((v) => ({ text: `${key}=${v}`, label: v, kind: "value" }));
  }
  return options.slice(0, SUGGESTIONS_MAX);
}

// `labels()` answers the current catalog {key: [values]} (it may still be loading when the field opens);
// `value`/`onChange` hold the text.
export function SelectorField({ labels, value, onChange, name = "node_selector" }) {
  const input = useRef(null);
  const [options, setOptions] = useState([]);
  const [open, setOpen] = useState(false);
  const [active, setActive] = useState(-1);

  const update = (text = input.current.value) => {
    const el = input.current;
    const next = suggestions(labels() || {}, text, el.selectionStart ?? text.length);
    setOptions(next);
    setActive(-1);
    setOpen(next.length > 0 && document.activeElement === el);
  };
  const choose = (option) => {
    const el = input.current;
    const { start, end } = current(el.value, el.selectionStart ?? el.value.length);
    const before = el.value.slice(0, start);
    const text = before + option.text + el.value.slice(end);
    el.value = text;
    onChange(text);
    const caret = (before + option.text).length;
    el.setSelectionRange(caret, caret);
    el.focus();
    update(text);
  };
  const keydown = (event) => {
    if (!open || !options.length) return;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      setActive((active + (event.key === "ArrowDown" ? 1 : options.length - 1)) % options.length);
    } else if (event.key === "Enter" && active >= 0) {
      event.preventDefault();
      choose(options[active]);
    } else if (event.key === "Escape") {
      setOpen(false);
    }
  };
  return html`<div class="complete">
    <input ref=${input} name=${name} value=${value} autocomplete="off" placeholder="e.g. gpu=nvidia,zone=eu-1"
      role="combobox" aria-autocomplete="list" aria-expanded=${String(open)} aria-label="Node selector"
      data-testid="selector" onInput=${(e) => { onChange(e.currentTarget.value); update(e.currentTarget.value); }}
      onFocus=${() => update()} onClick=${() => update()} onBlur=${() => setOpen(false)} onKeyDown=${keydown} />
    <ul class="suggestions" role="listbox" hidden=${!open}>
      ${options.map((o, i) => html`<li role="option" class="suggestion ${o.kind}${i === active ? " active" : ""}"
          data-testid="suggestion" data-value=${o.label}
          onMouseDown=${(event) => { event.preventDefault(); choose(o); }}>
        ${o.label}<span class="muted small">${o.kind === "key" ? " label" : " value"}</span></li>`)}
    </ul></div>`;
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
