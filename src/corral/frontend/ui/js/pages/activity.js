// Activity: operation cards with per-node rows, status pills, thin progress bars and errors.
// Backend installs / upgrades / removals come from GET /api/operations where that API exists (with its
// "clear history"); loads come from the running load jobs and the replicas they produced, config edits
// from the model config revisions.

import { api, optional } from "../api.js";
import { html } from "../lib.js";
import { ago, bytes, shortRevision } from "../format.js";
import { useApi } from "../hooks.js";
import { bar, dangerAction, empty, pill, toast, tone } from "../ui.js";
import { nodeNames, pageHead } from "./common.js";

const CARDS_MAX = 100;
const KINDS = { model_load: "load", staging: "load", backend_install: "install", backend_upgrade: "upgrade",
  backend_delete: "removal", model_delete: "removal", model_install: "install", config_edit: "config" };
const kindOf = (taskType) => KINDS[taskType] || String(taskType || "operation").replaceAll("_", " ");

function nodeRow({ node, status, progress, detail, error }) {
  return html`<li class="op-node" data-node=${node} data-status=${status}>
    <div class="row between small"><span>${node ? html`<b>${node}</b>` : null}${
      detail ? html`<span class="muted">${node ? ` · ${detail}` : detail}</span>` : ""}</span>${pill(status)}</div>
    ${progress != null ? bar(Number(progress), { thin: true, label: `${node} progress`, toneName: tone(status) }) : null}
    ${error ? html`<p class="form-error small">${error}</p>` : null}</li>`;
}

function card({ kind, title, status, when, rows, error, id }) {
  return html`<article key=${id} class="op-card" data-testid="op" data-kind=${kind} data-status=${status} data-id=${id}
      data-title=${title} data-tone=${tone(status)}>
    <header class="row between"><div><span class="tag">${kind}</span> <b>${title}</b></div>
      <div class="row">${when ? html`<span class="muted small">${when}</span>` : null}${pill(status)}</div></header>
    ${error ? html`<p class="form-error small">${error}</p>` : null}
    ${rows.length ? html`<ul class="op-nodes">${rows.map(nodeRow)}</ul>` : null}</article>`;
}

// GET /api/operations (live; fan-out jobs carry per-node rows) and /api/operations/history (finished).
// Progress is 0..100; `state` is the operator's word (Queued, Downloading, Worker busy, Done, Failed, …).
function operationCards(live, history) {
  const lower = (text) => String(text || "").toLowerCase();
  const running = live.filter((op) => op.taskType !== "staging").map((op) => { // loads: from load jobs below
    const rows = (op.nodes || []).map((n) => ({ node: n.node_name || n.node_id || "?", status: lower(n.state || n.status),
      progress: n.progress, error: n.error,
      detail: [n.file_name, n.total_file_size ? `${bytes(n.downloaded_file_size || 0)} / ${bytes(n.total_file_size)}` : ""].filter(Boolean).join(" · ") }));
    if (!rows.length && op.nodeName) {
      rows.push({ node: op.nodeName, status: lower(op.state || op.phase || "running"), progress: op.progress, error: op.error,
        detail: op.totalBytes ? `${bytes(op.currentBytes || 0)} / ${bytes(op.totalBytes)}` : "" });
    }
    return { kind: kindOf(op.taskType), id: op.id, title: op.fullName || op.name || op.id,
      status: lower(op.state || (op.isQueued ? "queued" : "running")), when: op.message || "", rows, error: op.error, sort: "~" };
  });
  const done = history.map((op) => ({ kind: kindOf(op.taskType), id: op.id, title: op.name || op.id,
    status: lower(op.outcome), when: ago(op.finishedAt || op.startedAt), sort: op.finishedAt || op.startedAt || "",
    error: op.error, rows: op.nodeName || op.message ? [{ node: op.nodeName || "", status: lower(op.outcome), detail: op.message }] : [] }));
  return [...running, ...done];
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

async function readActivity() {
  const [live, history, loads, rows, configs, names] = await Promise.all([optional("/api/operations"),
    optional("/api/operations/history"), api("/api/models/loads"), api("/api/nodes/models"),
    optional("/api/model-configs"), nodeNames()]);
  const replicas = rows.map((r) => ({ ...r, node_name: names.get(r.node_id) || r.node_id.slice(0, 8) }));
  const list = (body) => (body === null ? [] : Array.isArray(body) ? body : body.operations || []);
  // Where the activity record exists it has finished loads and config edits; else they are derived from
  // the replicas loaded now and the config revisions. Running loads always come from their load jobs.
  const derived = history === null ? [...loadCards(loads.loads, replicas), ...configCards(configs?.configs || [])]
    : loadCards(loads.loads, []);
  const cards = [...operationCards(list(live), list(history)), ...derived]
    .sort((a, b) => String(b.sort).localeCompare(String(a.sort))).slice(0, CARDS_MAX);
  return { cards, clearable: history !== null }; // the activity record lands with the backend-operations API
}

export default function ActivityPage() {
  const { data, error, reload } = useApi(readActivity, { kinds: ["replica", "load", "config", "node", "operation"],
    everyMs: 3000, quiet: true });
  const clear = dangerAction("Clear history", "Clear the finished operations for every frontend?", async () => {
    await api("/api/operations/history", { method: "DELETE" });
    toast("history cleared", "ok");
    await reload();
  }, { confirm: "Clear", kind: "ghost", testid: "clear-history" });
  return html`
    ${pageHead("Activity", "Installs, loads and config edits across the cluster", data?.clearable ? clear : null)}
    <div>${error && !data ? html`<div class="callout danger" role="alert">${error.message}</div>`
      : !data ? null : data.cards.length ? html`<div class="stack">${data.cards.map(card)}</div>` : empty("Nothing has happened yet.")}</div>`;
}
