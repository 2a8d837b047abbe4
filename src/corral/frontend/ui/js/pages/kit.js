// Small pieces the Dashboard, Settings, Keys, Gallery and Backends pages and the operations strip share:
// a poll hook that stops with the page, a confirm that uses the shell's dialog when it has one, a button
// whose async action is disabled while it runs, pills and bars. Pure helpers are exported for node tests.

import { html, useCallback, useEffect, useRef, useState } from "../lib.js";
import * as ui from "../ui.js";

// Styles of these pages and of the charts, linked once (the shell's index.html need not know them).
export function ensureCss(href) {
  if (typeof document === "undefined" || document.querySelector(`link[href="${href}"]`)) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = href;
  document.head.append(link);
}
ensureCss("/app/assets/pages.css");

export function notify(message, kind = "info") {
  if (typeof ui.toast === "function") ui.toast(message, kind);
}

// Ask before a destructive action: the shell's in-page dialog if it has one, else the browser's.
export async function confirmed(message, confirm = "Confirm") {
  if (typeof ui.confirmAction === "function") return Boolean(await ui.confirmAction(message, { confirm }));
  return window.confirm(message);
}

// Re-run `load` now and every `everyMs` (0: once) until the component goes, and at once when `key` changes
// (what the read depends on, e.g. a window); `reload()` runs it at once. A failed read keeps the last data and
// shows the error.
export function usePoll(load, everyMs, key = "") {
  const [state, setState] = useState({ data: undefined, error: null, loading: true });
  const live = useRef(true);
  const latest = useRef(load);
  latest.current = load;
  const run = useCallback(async () => {
    try {
      const data = await latest.current();
      if (live.current) setState({ data, error: null, loading: false });
    } catch (err) {
      if (live.current) setState((s) => ({ ...s, error: err.message || String(err), loading: false }));
    }
  }, []);
  useEffect(() => {
    live.current = true;
    run();
    const timer = everyMs > 0 ? setInterval(run, everyMs) : null;
    return () => { live.current = false; if (timer) clearInterval(timer); };
  }, [run, everyMs, key]);
  return { ...state, reload: run };
}

// A button running an async action: disabled while it runs, its error as a toast.
export function ActionButton({ label, run, kind = "", testid, title, disabled = false }) {
  const [busy, setBusy] = useState(false);
  const click = async (event) => {
    event.preventDefault();
    setBusy(true);
    try {
      await run();
    } catch (err) {
      notify(err.message || String(err), "danger");
    } finally {
      setBusy(false);
    }
  };
  return html`<button type="button" class=${`btn ${kind}`} data-testid=${testid} title=${title}
    disabled=${busy || disabled} onClick=${click}>${label}</button>`;
}

const TONES = {
  ok: "ok", healthy: "ok", done: "ok", completed: "ok", fits: "ok", on: "ok",
  failed: "danger", error: "danger", offline: "danger", revoked: "danger",
  downloading: "info", installing: "info", upgrading: "info", deleting: "info", running: "info", loading: "info",
  "worker busy": "warn", pending: "warn", queued: "muted",
};

export function toneOf(status) {
  return TONES[String(status || "").toLowerCase()] || "muted";
}

export function Pill({ status, label }) {
  return html`<span class=${`pill ${toneOf(status)}`} data-status=${String(status)}>${label ?? status}</span>`;
}

export function clampPct(pct) {
  const n = Number(pct);
  return Number.isFinite(n) ? Math.max(0, Math.min(100, n)) : 0;
}

export function Bar({ pct, label = "progress", tone = "info", thin = false }) {
  const value = clampPct(pct);
  return html`<div class=${`bar${thin ? " thin" : ""}`} role="progressbar" aria-valuemin="0" aria-valuemax="100"
    aria-valuenow=${Math.round(value)} aria-label=${label}>
    <span class=${`bar-fill ${tone}`} style=${{ width: `${value.toFixed(1)}%` }}></span></div>`;
}

export function PageHead({ title, subtitle, children }) {
  return html`<div class="page-head"><div><h1>${title}</h1>${subtitle ? html`<p class="muted">${subtitle}</p>` : null}</div>
    ${children ? html`<div class="row">${children}</div>` : null}</div>`;
}

export function ErrorLine({ error }) {
  return error ? html`<div class="callout danger" role="alert">${error}</div>` : null;
}
