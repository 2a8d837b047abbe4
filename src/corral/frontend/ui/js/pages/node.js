// Node detail: hardware and usage, labels, VRAM budget and max replicas, models (unload), backends,
// drain / resume / delete, and a backend's log. Backends and logs appear only where those APIs exist.

import { api, enc, optional } from "../api.js";
import { h, slot } from "../dom.js";
import { ago, bytes, percent, shortRevision } from "../format.js";
import { follow } from "../live.js";
import { navigate } from "../nav.js";
import { action, bar, confirmAction, empty, kv, panel, pill, toast } from "../ui.js";
import { pageHead } from "./common.js";

const LOG_POLL_MS = 2000;

function usage(label, total, available) {
  if (!total) return [label, "not reported"];
  const used = total - available;
  return [label, h("div", { class: "meter" }, h("span", { class: "meter-label" }, `${bytes(used)} used of ${bytes(total)} (${bytes(available)} free)`),
    bar(percent(used, total), { label, thin: true }))];
}

function hardware(n) {
  return panel("Hardware and usage", kv([
    ["Type", n.node_type || "backend"], ["Address", n.address || "—"], ["File server", n.http_address || "—"],
    ["GPU", n.gpu_vendor ? `${n.gpu_vendor} ${n.gpu_compute_capability || ""}` : "none"],
    ["Capability", n.capability || "cpu"],
    usage("VRAM", n.total_vram, n.available_vram), usage("RAM", n.total_ram, n.available_ram),
    usage("Disk", n.total_disk, n.available_disk),
    ["In flight", String(n.in_flight_count ?? 0)], ["Last heartbeat", ago(n.last_heartbeat)],
    ["Registered", n.created_at ? new Date(n.created_at).toLocaleString() : "—"],
  ]));
}

function labelsEditor(n, refresh) {
  const key = h("input", { name: "label-key", placeholder: "key", "aria-label": "Label key", maxlength: 128, required: true });
  const value = h("input", { name: "label-value", placeholder: "value", "aria-label": "Label value", maxlength: 255 });
  const form = h("form", { class: "row wrap inline-form", dataset: { testid: "label-form" } }, key, value,
    h("button", { type: "submit", class: "btn primary small" }, "Set label"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api(`/api/nodes/${enc(n.id)}/labels`, { method: "PATCH", body: { [key.value.trim()]: value.value.trim() } });
      toast(`label ${key.value.trim()} set`, "ok");
      key.value = value.value = "";
      await refresh();
    } catch (err) {
      toast(err.message, "danger");
    }
  });
  const rows = Object.entries(n.labels || {}).map(([k, v]) => h("li", { class: "row between", dataset: { label: k } },
    h("code", {}, `${k}=${v}`),
    action("Remove", async () => {
      await api(`/api/nodes/${enc(n.id)}/labels/${enc(k)}`, { method: "DELETE" });
      await refresh();
    }, { kind: "ghost small" })));
  return [rows.length ? h("ul", { class: "list", dataset: { testid: "labels" } }, rows) : empty("No labels."), form];
}

function limitsEditor(n, refresh) {
  const budget = h("input", { name: "vram-budget", placeholder: "e.g. 80% or 12GiB", maxlength: 32, value: n.vram_budget || "", "aria-label": "VRAM budget" });
  const replicas = h("input", { name: "max-replicas", type: "number", min: 1, max: 1024, value: n.max_replicas_per_model ?? 1, "aria-label": "Max replicas per model" });
  const save = (path, body, what) => async () => {
    await api(`/api/nodes/${enc(n.id)}/${path}`, { method: "PUT", body });
    toast(`${what} saved`, "ok");
    await refresh();
  };
  const reset = (path, what) => async () => {
    await api(`/api/nodes/${enc(n.id)}/${path}`, { method: "DELETE" });
    toast(`${what} reset`, "ok");
    await refresh();
  };
  return panel("Capacity", h("div", { class: "stack" },
    h("div", { class: "field" }, h("span", {}, "VRAM budget", n.vram_budget_manually_set ? h("em", { class: "muted" }, " (set by an admin)") : ""),
      h("div", { class: "row wrap" }, budget, action("Save", save("vram-budget", { get value() { return budget.value.trim(); } }, "VRAM budget"), { kind: "small" }),
        action("Reset", reset("vram-budget", "VRAM budget"), { kind: "ghost small" }))),
    h("div", { class: "field" }, h("span", {}, "Max replicas per model", n.max_replicas_per_model_manually_set ? h("em", { class: "muted" }, " (set by an admin)") : ""),
      h("div", { class: "row wrap" }, replicas, action("Save", save("max-replicas-per-model", { get value() { return Number(replicas.value); } }, "max replicas"), { kind: "small" }),
        action("Reset", reset("max-replicas-per-model", "max replicas"), { kind: "ghost small" })))));
}

function modelsTable(n, replicas, refresh) {
  if (!replicas.length) return empty("No model is loaded on this node.");
  return h("div", { class: "table-wrap" }, h("table", { class: "table" },
    h("thead", {}, h("tr", {}, ["Model", "Replica", "State", "Revision", "In flight", ""].map((t) => h("th", {}, t)))),
    h("tbody", {}, replicas.map((r) => h("tr", { dataset: { model: r.model_name } },
      h("td", {}, r.model_name), h("td", {}, `#${r.replica_index}`), h("td", {}, pill(r.state)),
      h("td", {}, h("code", { title: r.config_revision }, shortRevision(r.config_revision))), h("td", {}, String(r.in_flight ?? 0)),
      h("td", { class: "end" }, action("Unload", async () => {
        if (!await confirmAction(`Unload ${r.model_name} from ${n.name}?`, { confirm: "Unload" })) return;
        try {
          await api(`/api/nodes/${enc(n.id)}/models/unload`, { method: "POST", body: { model_name: r.model_name } });
        } catch (err) {
          if (err.status === 404 || err.status === 405) throw new Error("unloading is not available on this frontend yet");
          throw err;
        }
        toast(`${r.model_name} unloaded`, "ok");
        await refresh();
      }, { kind: "ghost small" })))))));
}

async function backendsPanel(n) {
  const backends = await optional(`/api/nodes/${enc(n.id)}/backends`);
  if (backends === null) return null; // the backend-management API is not on this frontend
  const list = Array.isArray(backends) ? backends : backends.backends || [];
  const name = h("input", { name: "backend", placeholder: "backend name", "aria-label": "Backend to install", maxlength: 255 });
  const op = (verb, backend) => async () => {
    const answer = await api(`/api/nodes/${enc(n.id)}/backends/${verb}`, { method: "POST", body: { backend } });
    toast(answer?.message || `${verb} started`, "ok"); // installs and upgrades run on: follow them in Activity
  };
  return panel("Backends", h("div", { class: "stack" },
    list.length ? h("ul", { class: "list" }, list.map((b) => h("li", { class: "row between" },
      h("span", {}, h("b", {}, b.name || b.backend || "?"), b.version ? h("span", { class: "muted" }, ` ${b.version}`) : ""),
      b.is_system ? h("span", { class: "tag" }, "built in") : h("div", { class: "row" },
        action("Upgrade", op("upgrade", b.name || b.backend), { kind: "ghost small" }),
        action("Delete", op("delete", b.name || b.backend), { kind: "ghost small danger" }))))) : empty("No backend installed."),
    h("div", { class: "row wrap" }, name, action("Install", async () => op("install", name.value.trim())(), { kind: "small" }))),
  { id: "backends" });
}

// The backend log of one model on this node, re-read every LOG_POLL_MS (a browser WebSocket cannot send the
// admin key as a bearer header, so the follow socket is for API clients). Hidden where the API is absent.
function logPanel(n) {
  const select = h("select", { "aria-label": "Model whose backend log to follow" });
  const out = h("pre", { class: "log", "aria-live": "off" }, "");
  const box = panel("Backend log", h("div", { class: "stack" }, select, out), { id: "backend-log" });
  const base = `/api/nodes/${enc(n.id)}/backend-logs`;
  let timer = null;
  box.hidden = true;
  const read = async () => {
    if (box.hidden || !select.value) return;
    let body;
    try {
      body = await api(`${base}/${enc(select.value)}`);
    } catch (err) {
      out.textContent = err.message; // e.g. the worker has no log of this model (any more)
      return;
    }
    out.textContent = (body.lines || []).map((l) => (typeof l === "string" ? l : l.text ?? JSON.stringify(l))).join("\n")
      || "(no output yet)";
    out.scrollTop = out.scrollHeight;
  };
  select.addEventListener("change", () => read().catch(() => {}));
  timer = setInterval(() => read().catch(() => {}), LOG_POLL_MS);
  return {
    el: box,
    async update() { // which models have a log on this node (null: no backend-logs API on this frontend)
      const listing = await optional(base).catch(() => null);
      const models = (listing || []).map((m) => m.model_id).filter(Boolean);
      box.hidden = !models.length;
      if (models.join("\n") === [...select.options].map((o) => o.value).join("\n")) return;
      const chosen = select.value;
      select.replaceChildren(...models.map((m) => h("option", { value: m, selected: m === chosen }, m)));
      await read();
    },
    stop() { clearInterval(timer); },
  };
}

export default function nodePage(root, id) {
  let node = null;
  let replicas = [];
  const log = logPanel({ id });
  const header = slot(() => node && pageHead(node.name, `${node.node_type || "backend"} node · ${node.id}`, pill(node.status),
    node.status === "pending" ? action("Approve", async () => { await api(`/api/nodes/${enc(id)}/approve`, { method: "POST" }); await refresh(); }, { kind: "primary" }) : null,
    node.status === "draining" || node.status === "offline"
      ? action("Resume", async () => { await api(`/api/nodes/${enc(id)}/resume`, { method: "POST" }); toast("node resumed", "ok"); await refresh(); })
      : action("Drain", async () => {
        if (!await confirmAction(`Drain ${node.name}? Its replicas are dropped and it takes no new work.`, { confirm: "Drain" })) return;
        await api(`/api/nodes/${enc(id)}/drain`, { method: "POST" });
        toast("node draining", "ok");
        await refresh();
      }),
    action("Delete", async () => {
      if (!await confirmAction(`Deregister ${node.name}? A running worker registers again on its next heartbeat.`, { confirm: "Delete" })) return;
      await api(`/api/nodes/${enc(id)}`, { method: "DELETE" });
      toast(`${node.name} deleted`, "ok");
      navigate("/app");
    }, { kind: "danger" })));
  const info = slot(() => node && hardware(node));
  const labels = slot(() => node && labelsEditor(node, force));
  const limits = slot(() => node && limitsEditor(node, force));
  const models = slot(() => node && modelsTable(node, replicas, force));
  const backends = slot(async () => (node ? (await backendsPanel(node)) || "" : ""));
  async function refresh(mine = false) {
    [node, replicas] = await Promise.all([api(`/api/nodes/${enc(id)}`), api(`/api/nodes/${enc(id)}/models`)]);
    await Promise.all([header, info, labels, limits, models].map((s) => s.refresh(mine)));
    log.update().catch(() => {});
  }
  const force = () => refresh(true); // after the operator's own edit: redraw even the region being edited
  root.append(header.el, h("div", { class: "grid two" },
    h("div", { class: "stack" }, info.el, limits.el),
    h("div", { class: "stack" }, panel("Labels", labels.el, { id: "labels" }), panel("Models", models.el, { id: "models" }), backends.el, log.el)));
  refresh().then(() => backends.refresh()).catch((err) => { root.replaceChildren(h("div", { class: "callout danger" }, err.message)); });
  const off = follow(["node", "replica", "load"], () => refresh().catch(() => {}), { everyMs: 15000 });
  return () => { off(); log.stop(); };
}
