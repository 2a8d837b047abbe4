// Nodes: the cluster pulse, nodes needing action (approve inline), and the roster with model chips.

import { api, enc } from "../api.js";
import { h, slot } from "../dom.js";
import { ago, bytes, percent } from "../format.js";
import { follow } from "../live.js";
import { action, bar, empty, link, pill, toast } from "../ui.js";
import { diskNearlyFull, labelChips, modelChip, nodesWithModels, pageHead } from "./common.js";

const FILTERS = [["all", "All"], ["backend", "Backend"], ["agent", "Agent"]];

function pulse(nodes) {
  const count = (status) => nodes.filter((n) => n.status === status).length;
  const models = nodes.reduce((sum, n) => sum + n.replicas.filter((r) => r.state === "loaded").length, 0);
  const inflight = nodes.reduce((sum, n) => sum + Number(n.in_flight_count || 0), 0);
  const item = (value, label, cls = "") => h("span", { class: `pulse-item ${cls}` }, h("b", {}, value), ` ${label}`);
  return h("div", { class: "pulse", dataset: { testid: "pulse" } },
    item(count("healthy"), "healthy", "ok"), item(count("pending"), "pending", count("pending") ? "warn" : ""),
    item(count("draining"), "draining"), item(count("offline") + count("unhealthy"), "offline",
      count("offline") + count("unhealthy") ? "danger" : ""),
    item(models, "models loaded"), item(inflight, "in flight"));
}

function attention(nodes, refresh) {
  const items = [];
  for (const n of nodes) {
    if (n.status === "pending") {
      items.push(h("li", { dataset: { node: n.name } }, h("span", {}, link(`/app/nodes/${n.id}`, n.name), " is waiting for approval"),
        action("Approve", async () => {
          await api(`/api/nodes/${enc(n.id)}/approve`, { method: "POST" });
          toast(`${n.name} approved`, "ok");
          await refresh();
        }, { kind: "primary small", testid: `approve-${n.name}` })));
    } else if (n.status === "offline" || n.status === "unhealthy") {
      items.push(h("li", {}, h("span", {}, link(`/app/nodes/${n.id}`, n.name), ` is stale: last heartbeat ${ago(n.last_heartbeat)}`)));
    }
    if (diskNearlyFull(n)) {
      items.push(h("li", {}, h("span", {}, link(`/app/nodes/${n.id}`, n.name),
        ` disk nearly full: ${bytes(n.available_disk)} free of ${bytes(n.total_disk)}`)));
    }
  }
  if (!items.length) return null;
  return h("div", { class: "callout warn", dataset: { testid: "attention" } },
    h("strong", {}, `${items.length} need${items.length === 1 ? "s" : ""} attention`), h("ul", {}, items));
}

function memoryBar(label, total, available) {
  if (!total) return null;
  const used = total - available;
  return h("div", { class: "meter" }, h("span", { class: "meter-label" }, `${label} ${bytes(used)} / ${bytes(total)}`),
    bar(percent(used, total), { label, thin: true, toneName: percent(used, total) > 90 ? "danger" : "info" }));
}

function nodeCard(n) {
  return h("article", { class: "node-card", dataset: { node: n.name, testid: "node-card" } },
    h("header", { class: "row between" },
      h("h3", {}, link(`/app/nodes/${n.id}`, n.name)),
      h("div", { class: "row" }, h("span", { class: "tag" }, n.node_type || "backend"), pill(n.status))),
    h("p", { class: "muted small" }, n.address || n.http_address || "", n.capability ? ` · ${n.capability}` : "",
      ` · heartbeat ${ago(n.last_heartbeat)}`),
    memoryBar(n.total_vram ? "VRAM" : "RAM", n.total_vram || n.total_ram, n.total_vram ? n.available_vram : n.available_ram),
    memoryBar("Disk", n.total_disk, n.available_disk),
    h("div", { class: "chips" }, n.replicas.length ? n.replicas.map((r) => modelChip(r)) : h("span", { class: "muted small" }, "no models")),
    h("div", { class: "chips" }, labelChips(n.labels)));
}

export default function nodesPage(root) {
  let filter = "all";
  let nodes = [];
  const filters = h("div", { class: "segmented", role: "group", "aria-label": "Node type" });
  const roster = slot(() => {
    const shown = nodes.filter((n) => filter === "all" || (n.node_type || "backend") === filter);
    return shown.length ? h("div", { class: "grid cards" }, shown.map(nodeCard))
      : empty(nodes.length ? "No node of this type." : "No node has registered yet. Start a worker with `corral worker --register-to …`.");
  });
  const head = slot(() => [pulse(nodes), attention(nodes, refresh)]);
  const drawFilters = () => filters.replaceChildren(...FILTERS.map(([id, label]) => h("button", {
    type: "button", class: `btn small${filter === id ? " active" : ""}`, "aria-pressed": String(filter === id),
    onclick: () => { filter = id; drawFilters(); roster.refresh(); },
  }, label)));
  async function refresh() {
    nodes = await nodesWithModels();
    await Promise.all([head.refresh(), roster.refresh()]);
  }
  drawFilters();
  root.append(pageHead("Nodes", "Workers registered with this cluster"), head.el,
    h("div", { class: "row between toolbar" }, h("h2", {}, "Roster"), filters), roster.el);
  refresh().catch((err) => toast(err.message, "danger"));
  return follow(["node", "replica", "load"], () => refresh().catch(() => {}), { everyMs: 15000 });
}
