// A tiny element builder: h("div", {class: "x", onclick: fn}, child, "text", [more]) → HTMLElement.
// Strings are always text nodes (never parsed as HTML), so API data cannot inject markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name === "value") el.value = value;
    else if (name === "checked" || name === "disabled" || name === "selected") el[name] = Boolean(value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// A region of a page that re-renders from fresh data, unless the operator is editing inside it.
const FIELDS = new Set(["INPUT", "TEXTAREA", "SELECT"]);

export function slot(render, attrs = {}) {
  const el = h("div", attrs);
  let last = null;
  el.addEventListener("focusin", (event) => { if (FIELDS.has(event.target.tagName)) el.dataset.editing = "1"; });
  el.addEventListener("focusout", () => setTimeout(() => {
    if (!FIELDS.has(document.activeElement?.tagName) || !el.contains(document.activeElement)) el.dataset.editing = "";
  }, 0));
  const draw = async (force) => {
    if (el.dataset.editing === "1" && !force) return;
    el.dataset.editing = "";
    const content = await render();
    if (content !== undefined) replace(el, content);
  };
  return {
    el,
    // A live hint skips a region being edited; the operator's own action (force) redraws it.
    refresh(force = false) { last = draw(force).catch((err) => replace(el, errorBox(err))); return last; },
    hold(on) { el.dataset.editing = on ? "1" : ""; },
  };
}

export function errorBox(err) {
  return h("div", { class: "callout danger", role: "alert" }, String(err && err.message ? err.message : err));
}
