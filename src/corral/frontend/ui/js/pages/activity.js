// Activity: operation cards with per-node rows, status pills, thin progress bars and errors.
// Backend installs / upgrades / removals come from GET /api/operations where that API exists (with its
// "clear history"); loads come from the running load jobs and the replicas they produced, config edits
// from the model config revisions.

import { api, optional } from "../api.js";
import { h, slot } from "../dom.js";
import { ago, bytes, shortRevision } from "../format.js";
import { follow } from "../live.js";
import { action, bar, confirmAction, empty, pill, toast, tone } from "../ui.js";
import { nodeNames, pageHead } from "./common.js";

const CARDS_MAX = 100;

function pct(value) {
  if (value == null) return 0;
  return value <= 1 && value >= 0 && !Number.isInteger(value) ? value * 100 : value; // 0..1 or 0..100
}

function nodeRow({ node, status, progress, detail, error }) {
  return h("li", { class: "op-node", dataset: { node, status } },
    h("div", { class: "row between small" }, h("span", {}, h("b", {}, node), detail ? h("span", { class: "muted" }, ` · ${detail}`) : ""), pill(status)),
    progress != null ? bar(pct(progress), { thin: true, label: `${node} progress`, toneName: tone(status) }) : null,
    error ? h("p", { class: "form-error small" }, error) : null);
}

function card({ kind, title, status, when, rows, error, id }) {
  return h("article", { class: "op-card", dataset: { testid: "op", kind, status, id } },
    h("header", { class: "row between" }, h("div", {}, h("span", { class: "tag" }, kind), " ", h("b", {}, title)),
      h("div", { class: "row" }, when ? h("span", { class: "muted small" }, when) : null, pill(status))),
    error ? h("p", { class: "form-error small" }, error) : null,
    rows.length ? h("ul", { class: "op-nodes" }, rows.map(nodeRow)) : null);
}

function operationCards(ops) {
  return ops.map((op) => {
    const perNode = op.nodes || op.node_rows || op.per_node || [];
    const rows = perNode.map((n) => ({ node: n.node_name || n.nodeName || n.node || n.node_id || "?",
      status: String(n.status || n.state || "queued").toLowerCase(), progress: n.progress,
      detail: [n.current_file || n.file_name, n.total_bytes ? `${bytes(n.current_bytes || 0)} / ${bytes(n.total_bytes)}` : ""].filter(Boolean).join(" · "),
      error: n.error }));
    if (!rows.length && (op.nodeName || op.node_name)) {
      rows.push({ node: op.nodeName || op.node_name, status: String(op.status || op.phase || "running").toLowerCase(), progress: op.progress, error: op.error });
    }
    return { kind: op.op_type || op.taskType || op.op || "operation", id: op.id || op.jobID,
      title: op.fullName || op.name || op.gallery_element_name || op.backend || op.id,
      status: String(op.status || op.phase || (op.progress >= 100 ? "completed" : "running")).toLowerCase(),
      when: op.updated_at || op.created_at ? ago(op.updated_at || op.created_at) : "", rows, error: op.error, sort: op.updated_at || op.created_at || "" };
  });
}

function loadCards(loads, replicas) {
  const running = loads.map((l) => ({ kind: "load", id: `load:${l.model}`, title: l.model,
    status: l.error ? "failed" : l.state, when: "now", error: l.error,
    rows: [{ node: l.node || "placing…", status: l.error ? "failed" : l.state, progress: l.progress,
      detail: l.total_bytes ? `${bytes(l.bytes_sent)} / ${bytes(l.total_bytes)}` : "" }], sort: "~" }));
  const byModel = new Map();
  for (const r of replicas) {
    if (loads.some((l) => l.model === r.model_name)) continue;
    if (!byModel.has(r.model_name)) byModel.set(r.model_name, []);
    byModel.get(r.model_name).push(r);
  }
  const done = [...byModel].map(([model, rs]) => {
    const latest = rs.map((r) => r.created_at).sort().at(-1);
    return { kind: "load", id: `load:${model}`, title: model, status: "ready", when: ago(latest), sort: latest || "",
      rows: rs.map((r) => ({ node: r.node_name, status: r.state, progress: 100,
        detail: `replica #${r.replica_index} · rev ${shortRevision(r.config_revision)}` })) };
  });
  return [...running, ...done];
}

function configCards(configs) {
  return configs.filter((c) => c.updated_at).map((c) => ({ kind: "config", id: `config:${c.name}`, title: c.name,
    status: c.disabled ? "disabled" : "active", when: ago(c.updated_at), sort: c.updated_at,
    rows: [], error: null, detailLine: `revision ${shortRevision(c.config_revision)}` }))
    .map((c) => ({ ...c, rows: [{ node: "all frontends", status: "done", detail: c.detailLine }] }));
}

export default function activityPage(root) {
  let hasOperations = false;
  const list = slot(async () => {
    const [ops, loads, rows, configs, names] = await Promise.all([optional("/api/operations"), api("/api/models/loads"),
      api("/api/nodes/models"), optional("/api/model-configs"), nodeNames()]);
    const replicas = rows.map((r) => ({ ...r, node_name: names.get(r.node_id) || r.node_id.slice(0, 8) }));
    hasOperations = ops !== null;
    clear.hidden = !hasOperations;
    const opList = ops === null ? [] : Array.isArray(ops) ? ops : ops.operations || [];
    const cards = [...operationCards(opList), ...loadCards(loads.loads, replicas), ...configCards(configs?.configs || [])]
      .sort((a, b) => String(b.sort).localeCompare(String(a.sort))).slice(0, CARDS_MAX);
    return cards.length ? h("div", { class: "stack" }, cards.map(card)) : empty("Nothing has happened yet.");
  });
  const clear = action("Clear history", async () => {
    if (!await confirmAction("Clear the finished operations for every frontend?", { confirm: "Clear" })) return;
    await api("/api/operations", { method: "DELETE" });
    toast("history cleared", "ok");
    await list.refresh();
  }, { kind: "ghost", testid: "clear-history" });
  clear.hidden = true;
  root.append(pageHead("Activity", "Installs, loads and config edits across the cluster", clear), list.el);
  list.refresh();
  return follow(["replica", "load", "config", "node", "operation"], () => list.refresh(), { everyMs: 3000 });
}
