// Reads and pieces shared by several pages.

import { api, enc } from "../api.js";
import { html } from "../lib.js";
import { shortRevision } from "../format.js";
import { link, tone } from "../ui.js";

export const DISK_NEARLY_FULL = 0.1; // under 10 % free: the node cannot stage another model for long
const CHIPS_NODES_MAX = 64; // per-node replica reads for the roster's chips

export async function nodesWithModels() {
  const nodes = await api("/api/nodes");
  const replicas = await Promise.all(nodes.slice(0, CHIPS_NODES_MAX).map(
    (n) => api(`/api/nodes/${enc(n.id)}/models`).catch(() => [])));
  return nodes.map((n, i) => ({ ...n, replicas: replicas[i] || [] }));
}

// Replica rows carry node ids: name them for the operator.
export async function nodeNames() {
  return new Map((await api("/api/nodes")).map((n) => [n.id, n.name]));
}

export function diskNearlyFull(node) {
  return node.total_disk > 0 && node.available_disk / node.total_disk < DISK_NEARLY_FULL;
}

export function modelChip(replica, { node } = {}) {
  const text = `${replica.model_name} #${replica.replica_index ?? 0}`;
  return html`<span class="chip ${tone(replica.state)}" title=${`state ${replica.state}, revision ${replica.config_revision || "—"}`}
      data-model=${replica.model_name} data-state=${replica.state}>
    ${node ? link(`/app/nodes/${node}`, text) : text}
    <span class="chip-meta">${` ${replica.state} · ${shortRevision(replica.config_revision)}`}</span></span>`;
}

export function labelChips(labels) {
  return Object.entries(labels || {}).map(([k, v]) => html`<span class="chip label">${`${k}=${v}`}</span>`);
}

export function pageHead(title, subtitle, ...actions) {
  const shown = actions.filter(Boolean);
  return html`<div class="page-head">
    <div><h1>${title}</h1>${subtitle ? html`<p class="muted">${subtitle}</p>` : null}</div>
    ${shown.length ? html`<div class="row">${shown}</div>` : null}</div>`;
}
