// Nodes: the cluster pulse, nodes needing action (approve inline), and the roster with model chips.

import { api, enc } from "../api.js";
import { html, useState } from "../lib.js";
import { ago, bytes, percent } from "../format.js";
import { useApi } from "../hooks.js";
import { action, bar, empty, link, pill, toast } from "../ui.js";
import { diskNearlyFull, labelChips, modelChip, nodesWithModels, pageHead } from "./common.js";

const FILTERS = [["all", "All"], ["backend", "Backend"], ["agent", "Agent"]];

function Pulse({ nodes }) {
  const count = (status) => nodes.filter((n) => n.status === status).length;
  const models = nodes.reduce((sum, n) => sum + n.replicas.filter((r) => r.state === "loaded").length, 0);
  const inflight = nodes.reduce((sum, n) => sum + Number(n.in_flight_count || 0), 0);
  const offline = count("offline") + count("unhealthy");
  const item = (value, label, cls = "") => html`<span class="pulse-item ${cls}"><b>${value}</b>${` ${label}`}</span>`;
  return html`<div class="pulse" data-testid="pulse">
    ${item(count("healthy"), "healthy", "ok")}${item(count("pending"), "pending", count("pending") ? "warn" : "")}
    ${item(count("draining"), "draining")}${item(offline, "offline", offline ? "danger" : "")}
    ${item(models, "models loaded")}${item(inflight, "in flight")}</div>`;
}

function Attention({ nodes, refresh }) {
  const items = [];
  for (const n of nodes) {
    const name = link(`/app/nodes/${n.id}`, n.name);
    if (n.status === "pending") {
      items.push(html`<li data-node=${n.name}><span>${name} is waiting for approval</span>
        ${action("Approve", async () => {
          await api(`/api/nodes/${enc(n.id)}/approve`, { method: "POST" });
          toast(`${n.name} approved`, "ok");
          await refresh();
        }, { kind: "primary small", testid: `approve-${n.name}` })}</li>`);
    } else if (n.status === "offline" || n.status === "unhealthy") {
      items.push(html`<li><span>${name}${` is stale: last heartbeat ${ago(n.last_heartbeat)}`}</span></li>`);
    }
    if (diskNearlyFull(n)) {
      items.push(html`<li><span>${name}${` disk nearly full: ${bytes(n.available_disk)} free of ${bytes(n.total_disk)}`}</span></li>`);
    }
  }
  if (!items.length) return null;
  return html`<div class="callout warn" data-testid="attention">
    <strong>${`${items.length} need${items.length === 1 ? "s" : ""} attention`}</strong><ul>${items}</ul></div>`;
}

function memoryBar(label, total, available) {
  if (!total) return null;
  const used = total - available;
  return html`<div class="meter"><span class="meter-label">${`${label} ${bytes(used)} / ${bytes(total)}`}</span>
    ${bar(percent(used, total), { label, thin: true, toneName: percent(used, total) > 90 ? "danger" : "info" })}</div>`;
}

function NodeCard({ n }) {
  return html`<article class="node-card" data-node=${n.name} data-testid="node-card">
    <header class="row between"><h3>${link(`/app/nodes/${n.id}`, n.name)}</h3>
      <div class="row"><span class="tag">${n.node_type || "backend"}</span>${pill(n.status)}</div></header>
    <p class="muted small">${n.address || n.http_address || ""}${n.capability ? ` · ${n.capability}` : ""}${` · heartbeat ${ago(n.last_heartbeat)}`}</p>
    ${memoryBar(n.total_vram ? "VRAM" : "RAM", n.total_vram || n.total_ram, n.total_vram ? n.available_vram : n.available_ram)}
    ${memoryBar("Disk", n.total_disk, n.available_disk)}
    <div class="chips">${n.replicas.length ? n.replicas.map((r) => modelChip(r)) : html`<span class="muted small">no models</span>`}</div>
    <div class="chips">${labelChips(n.labels)}</div></article>`;
}

export default function NodesPage() {
  const [filter, setFilter] = useState("all");
  const { data: nodes, reload } = useApi(nodesWithModels, { kinds: ["node", "replica", "load"], everyMs: 15000, initial: [] });
  const shown = nodes.filter((n) => filter === "all" || (n.node_type || "backend") === filter);
  return html`
    ${pageHead("Nodes", "Workers registered with this cluster")}
    <${Pulse} nodes=${nodes} /><${Attention} nodes=${nodes} refresh=${reload} />
    <div class="row between toolbar"><h2>Roster</h2>
      <div class="segmented" role="group" aria-label="Node type">
        ${FILTERS.map(([id, label]) => html`<button type="button" class="btn small${filter === id ? " active" : ""}"
          aria-pressed=${String(filter === id)} onClick=${() => setFilter(id)}>${label}</button>`)}</div></div>
    <div>${shown.length ? html`<div class="grid cards">${shown.map((n) => html`<${NodeCard} key=${n.id} n=${n} />`)}</div>`
      : empty(nodes.length ? "No node of this type." : "No node has registered yet. Start a worker with `corral worker --register-to …`.")}</div>`;
}
