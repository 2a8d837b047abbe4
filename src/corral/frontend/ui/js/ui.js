// Shared pieces every page uses, so the pages look alike: pills, bars, buttons, panels, toasts, dialogs.

import { h } from "./dom.js";

const TONES = {
  ok: "ok", healthy: "ok", loaded: "ok", ready: "ok", active: "ok", completed: "ok", done: "ok", on_demand: "info",
  pending: "warn", draining: "warn", staging: "info", loading: "info", installing: "info", downloading: "info",
  processing: "info", queued: "muted", waiting: "warn", cooling_down: "warn", unsatisfiable: "danger",
  offline: "danger", unhealthy: "danger", failed: "danger", error: "danger", shadowed: "muted", inert: "muted",
  disabled: "muted", unloading: "warn", stale: "warn", busy: "warn", "worker busy": "warn", running: "info",
  upgrading: "info", deleting: "info", cancelled: "muted", worker_busy: "warn",
};

export function tone(status) {
  return TONES[String(status || "").toLowerCase()] || "muted";
}

export function pill(status, label) {
  return h("span", { class: `pill ${tone(status)}`, dataset: { status: String(status) } }, label ?? status);
}

export function bar(pct, { label, toneName = "info", thin = false } = {}) {
  const fill = h("span", { class: `bar-fill ${toneName}` });
  fill.style.width = `${Math.max(0, Math.min(100, pct || 0)).toFixed(1)}%`;
  return h("div", {
    class: `bar${thin ? " thin" : ""}`, role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100,
    "aria-valuenow": Math.round(pct || 0), "aria-label": label || "progress",
  }, fill);
}

export function panel(title, body, { actions, id, cls = "" } = {}) {
  return h("section", { class: `panel ${cls}`, id },
    title || actions ? h("header", { class: "panel-head" }, h("h2", {}, title), actions ? h("div", { class: "row" }, actions) : null) : null,
    body);
}

export function empty(text) {
  return h("p", { class: "empty" }, text);
}

export function kv(pairs) {
  return h("dl", { class: "kv" }, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

let toastBox = null;
export function toast(message, kind = "info") {
  if (!toastBox) {
    toastBox = h("div", { class: "toasts", role: "status", "aria-live": "polite" });
    document.body.append(toastBox);
  }
  const item = h("div", { class: `toast ${kind}` }, message);
  toastBox.append(item);
  setTimeout(() => item.remove(), kind === "danger" ? 8000 : 4000);
}

// A button whose click runs an async action: disabled while it runs, its error shown as a toast.
export function action(label, run, { kind = "", title, testid } = {}) {
  const btn = h("button", { type: "button", class: `btn ${kind}`, title, dataset: testid ? { testid } : undefined }, label);
  btn.addEventListener("click", async (event) => {
    event.preventDefault();
    btn.disabled = true;
    try {
      await run();
    } catch (err) {
      toast(err.message || String(err), "danger");
    } finally {
      btn.disabled = false;
    }
  });
  return btn;
}

// An in-page confirmation (native confirm() blocks the page and cannot be styled).
export function confirmAction(message, { confirm = "Confirm", danger = true } = {}) {
  return new Promise((resolve) => {
    const dialog = h("dialog", { class: "dialog" });
    const close = (answer) => { dialog.close(); dialog.remove(); resolve(answer); };
    dialog.append(
      h("p", {}, message),
      h("div", { class: "row end" },
        h("button", { type: "button", class: "btn", onclick: () => close(false) }, "Cancel"),
        h("button", { type: "button", class: `btn ${danger ? "danger" : "primary"}`, onclick: () => close(true) }, confirm)),
    );
    dialog.addEventListener("cancel", () => close(false));
    document.body.append(dialog);
    dialog.showModal();
  });
}

export function link(href, ...children) {
  return h("a", { href, "data-link": "" }, ...children);
}
