// Shared pieces every page uses, so the pages look alike: pills, bars, buttons, panels (Preact vnodes), and the
// toasts and confirmation dialog any module may call imperatively.

import { html, render, useEffect, useRef, useState } from "./lib.js";

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
  return html`<span class="pill ${tone(status)}" data-status=${String(status)}>${label ?? status}</span>`;
}

export function bar(pct, { label, toneName = "info", thin = false } = {}) {
  const width = `${Math.max(0, Math.min(100, pct || 0)).toFixed(1)}%`;
  return html`<div class="bar${thin ? " thin" : ""}" role="progressbar" aria-valuemin="0" aria-valuemax="100"
      aria-valuenow=${Math.round(pct || 0)} aria-label=${label || "progress"}>
    <span class="bar-fill ${toneName}" style=${{ width }}></span></div>`;
}

export function panel(title, body, { actions, id, cls = "" } = {}) {
  return html`<section class="panel ${cls}" id=${id}>
    ${title || actions ? html`<header class="panel-head"><h2>${title}</h2>${actions ? html`<div class="row">${actions}</div>` : null}</header>` : null}
    ${body}</section>`;
}

export function empty(text) {
  return html`<p class="empty">${text}</p>`;
}

export function kv(pairs) {
  return html`<dl class="kv">${pairs.filter(Boolean).map(([k, v]) => html`<dt>${k}</dt><dd>${v}</dd>`)}</dl>`;
}

export function errorBox(err) {
  return html`<div class="callout danger" role="alert">${String(err && err.message ? err.message : err)}</div>`;
}

export function link(href, ...children) {
  return html`<a href=${href} data-link="">${children}</a>`;
}

// An <option> whose value is also its attribute, so `option[value=x]` finds it: Preact sets only the property,
// and skips that when it equals the text (an option's value defaults to its text).
const keepValue = (el) => { if (el && !el.hasAttribute("value")) el.setAttribute("value", el.value); };
export function option(value, text = value) {
  return html`<option value=${value} ref=${keepValue}>${text}</option>`;
}

let toastBox = null;
export function toast(message, kind = "info") {
  if (!toastBox || !toastBox.isConnected) {
    toastBox = document.createElement("div");
    toastBox.className = "toasts";
    toastBox.setAttribute("role", "status");
    toastBox.setAttribute("aria-live", "polite");
    document.body.append(toastBox);
  }
  const item = document.createElement("div");
  item.className = `toast ${kind}`;
  item.textContent = String(message); // text, never markup
  toastBox.append(item);
  setTimeout(() => item.remove(), kind === "danger" ? 8000 : 4000);
}

// A button whose click runs an async action: disabled while it runs, its error shown as a toast.
export function ActionButton({ label, run, kind = "", title, testid, children }) {
  const [busy, setBusy] = useState(false);
  const mounted = useRef(true);
  useEffect(() => () => { mounted.current = false; }, []);
  const click = async (event) => {
    event.preventDefault();
    setBusy(true);
    try {
      await run();
    } catch (err) {
      toast(err.message || String(err), "danger");
    } finally {
      if (mounted.current) setBusy(false);
    }
  };
  return html`<button type="button" class="btn ${kind}" title=${title} data-testid=${testid} disabled=${busy}
    onClick=${click}>${label}${children}</button>`;
}

export function action(label, run, { kind = "", title, testid } = {}) {
  return html`<${ActionButton} label=${label} run=${run} kind=${kind} title=${title} testid=${testid} />`;
}

// An in-page confirmation (native confirm() blocks the page and cannot be styled): a modal <dialog>.
// It opens as it is attached (a ref callback, not an effect that runs a frame later), so the page's next click
// already meets it.
function openModal(dialog) {
  if (dialog && !dialog.open && dialog.isConnected && dialog.showModal) dialog.showModal();
}

export function ConfirmDialog({ message, confirm = "Confirm", danger = true, onAnswer }) {
  return html`<dialog ref=${openModal} class="dialog" data-testid="confirm"
      onCancel=${(event) => { event.preventDefault(); onAnswer(false); }}>
    <p>${message}</p>
    <div class="row end">
      <button type="button" class="btn" onClick=${() => onAnswer(false)}>Cancel</button>
      <button type="button" class="btn ${danger ? "danger" : "primary"}" data-testid="confirm-yes"
        onClick=${() => onAnswer(true)}>${confirm}</button>
    </div></dialog>`;
}

// Ask before a destructive action; resolves true when the operator confirms.
export function confirmAction(message, { confirm = "Confirm", danger = true } = {}) {
  return new Promise((resolve) => {
    const host = document.createElement("div");
    document.body.append(host);
    const onAnswer = (answer) => {
      render(null, host);
      host.remove();
      resolve(answer);
    };
    render(html`<${ConfirmDialog} message=${message} confirm=${confirm} danger=${danger} onAnswer=${onAnswer} />`, host);
  });
}

// action() whose run first asks `question`: a destructive button.
export function dangerAction(label, question, run, { confirm = label, kind = "ghost small danger", title, testid } = {}) {
  return action(label, async () => {
    if (await confirmAction(question, { confirm })) await run();
  }, { kind, title, testid });
}
