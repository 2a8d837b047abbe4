// The operations strip at the top of every page while a backend install, upgrade or delete (or a model's
// staging) runs: its percentage and, for an install to several workers, how far the fan-out got
// ("2 of 5 nodes done"). Per-file bytes and per-node rows are on the Activity page. Hidden when nothing runs.
// Read from GET /api/operations (PostgreSQL: the same on every frontend): every second while something runs,
// every few seconds otherwise, and at once on a live event.

import { html, useEffect, useRef, useState } from "./lib.js";
import { api } from "./api.js";
import * as live from "./live.js";
import { Bar, clampPct } from "./pages/kit.js";

const BUSY_POLL_MS = 1000;
const IDLE_POLL_MS = 4000;
const EVENT_KINDS = ["operation", "load", "replica", "node"];

const VERBS = {
  backend_install: "Installing", backend_upgrade: "Upgrading", backend_delete: "Deleting", fanout: "Installing",
  model_install: "Installing", model_delete: "Deleting", model_load: "Loading", staging: "Staging",
};

// "2 of 5 nodes done" (", 1 failed") from a fan-out entry's per-node rows; null for a single-node operation.
export function rollup(entry) {
  const nodes = Array.isArray(entry.nodes) ? entry.nodes : null;
  if (!nodes || !nodes.length) return null;
  const done = nodes.filter((n) => n.state === "Done").length;
  const failed = nodes.filter((n) => n.state === "Failed").length;
  const busy = nodes.filter((n) => n.state === "Worker busy").length;
  let text = `${done} of ${nodes.length} nodes done`;
  if (failed) text += `, ${failed} failed`;
  if (busy) text += `, ${busy} worker(s) busy`;
  return { done, failed, busy, total: nodes.length, text };
}

// What the strip shows of GET /api/operations: one item per live operation.
export function stripItems(body) {
  const ops = (body && Array.isArray(body.operations)) ? body.operations : [];
  return ops.map((op) => {
    const up = rollup(op);
    const verb = op.isQueued ? "Queued:" : op.isDeletion ? "Deleting" : VERBS[op.taskType] || "Running";
    const where = up ? `${up.total} nodes` : op.nodeName ? `on ${op.nodeName}` : "";
    return {
      id: String(op.jobID || op.id),
      title: `${verb} ${op.name || op.fullName || ""}`.trim(),
      where,
      pct: clampPct(op.progress),
      summary: up ? up.text : op.message || op.state || "",
      failed: Boolean(op.error) || (up ? up.failed > 0 : false),
      rollup: up,
    };
  });
}

export default function OpsStrip() {
  const [items, setItems] = useState([]);
  const busy = useRef(false);
  useEffect(() => {
    let stopped = false;
    let timer = null;
    const read = async () => {
      clearTimeout(timer);
      try {
        const next = stripItems(await api("/api/operations"));
        if (stopped) return;
        busy.current = next.length > 0;
        setItems(next);
      } catch { /* logged out or a blip: keep what is shown, try again */ }
      if (!stopped) timer = setTimeout(read, busy.current ? BUSY_POLL_MS : IDLE_POLL_MS);
    };
    read();
    const off = typeof live.onLive === "function"
      ? live.onLive((event) => { if (event && (event.kind === "resync" || EVENT_KINDS.includes(event.kind))) read(); })
      : null;
    return () => { stopped = true; clearTimeout(timer); if (off) off(); };
  }, []);
  if (!items.length) return null;
  return html`<div class="ops-strip" data-testid="ops-strip" role="status" aria-live="polite">
    ${items.map((it) => html`<div class=${`ops-item${it.failed ? " failed" : ""}`} key=${it.id} data-testid="ops-item" data-op=${it.id}
        data-progress=${Math.round(it.pct)}>
      <span class="ops-title"><b>${it.title}</b>${it.where ? html` <span class="muted">${it.where}</span>` : null}</span>
      <span class="ops-bar"><${Bar} pct=${it.pct} label=${`${it.title}: ${Math.round(it.pct)}%`} tone=${it.failed ? "danger" : "info"} thin=${true} /></span>
      <span class="ops-pct">${Math.round(it.pct)}%</span>
      <span class="ops-summary small" data-testid="ops-rollup">${it.summary}</span>
      <a class="small" href="/app/activity" data-link="">Details</a>
    </div>`)}</div>`;
}
