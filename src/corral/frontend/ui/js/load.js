// One model load as a line: its state and node, progress (bytes, file i/n, ETA) as a bar, and its error.
// The Models page lists them; the Chat page and the Models page's Try panels show one while a cold model loads.

import { html } from "./lib.js";
import { bytes, duration } from "./format.js";
import { bar, pill } from "./ui.js";

export function loadLine(load) {
  const failed = load.state === "failed" || load.error;
  const eta = load.eta_seconds != null ? ` · ETA ~${duration(load.eta_seconds)}` : "";
  const files = load.total_files > 1 ? ` · file ${load.file_index}/${load.total_files}` : "";
  const size = load.total_bytes ? ` · ${bytes(load.bytes_sent)} / ${bytes(load.total_bytes)}` : "";
  const toneName = failed ? "danger" : load.state === "ready" ? "ok" : "info";
  return html`<div class="load" data-testid="load" data-model=${load.model} data-state=${failed ? "failed" : load.state}>
    <div class="row between small">
      <span>${pill(failed ? "failed" : load.state)}${load.node ? ` on ${load.node}` : ""}</span>
      <span class="muted">${`${Math.round(load.progress || 0)}%${size}${files}${eta}`}</span>
    </div>
    ${bar(load.state === "ready" ? 100 : load.progress, { label: `load of ${load.model}`, toneName })}
    ${failed && load.error ? html`<p class="form-error small">${load.error}</p>` : null}
  </div>`;
}
