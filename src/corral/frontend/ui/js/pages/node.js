// Node detail: hardware and usage, labels, VRAM budget and max replicas, models (unload), backends,
// drain / resume / delete, and a backend's log. Backends and logs appear only where those APIs exist.

import { api, enc, optional } from "../api.js";
import { html, useEffect, useState } from "../lib.js";
import { ago, bytes, percent, shortRevision } from "../format.js";
import { useApi, useField } from "../hooks.js";
import { navigate } from "../router.js";
import { action, bar, dangerAction, empty, kv, panel, pill, toast } from "../ui.js";
import { pageHead } from "./common.js";

const LOG_POLL_MS = 2000;

function usage(label, total, available) {
  if (!total) return [label, "not reported"];
  const used = total - available;
  return [label, html`<div class="meter"><span class="meter-label">${`${bytes(used)} used of ${bytes(total)} (${bytes(available)} free)`}</span>
    ${bar(percent(used, total), { label, thin: true })}</div>`];
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

function Labels({ n, refresh }) {
  const [key, setKey, onKey] = useField("");
  const [value, setValue, onValue] = useField("");
  const submit = async (event) => {
    event.preventDefault();
    try {
      await api(`/api/nodes/${enc(n.id)}/labels`, { method: "PATCH", body: { [key.trim()]: value.trim() } });
      toast(`label ${key.trim()} set`, "ok");
      setKey("");
      setValue("");
      await refresh();
    } catch (err) {
      toast(err.message, "danger");
    }
  };
  const rows = Object.entries(n.labels || {});
  return html`
    ${rows.length ? html`<ul class="list" data-testid="labels">${rows.map(([k, v]) => html`<li class="row between" data-label=${k}>
      <code>${`${k}=${v}`}</code>
      ${dangerAction("Remove", `Remove the label ${k}=${v} from ${n.name}?`, async () => {
        await api(`/api/nodes/${enc(n.id)}/labels/${enc(k)}`, { method: "DELETE" });
        await refresh();
      }, { kind: "ghost small" })}</li>`)}</ul>` : empty("No labels.")}
    <form class="row wrap inline-form" data-testid="label-form" onSubmit=${submit}>
      <input name="label-key" placeholder="key" aria-label="Label key" maxlength="128" required value=${key} onInput=${onKey} />
      <input name="label-value" placeholder="value" aria-label="Label value" maxlength="255" value=${value} onInput=${onValue} />
      <button type="submit" class="btn primary small">Set label</button></form>`;
}

function Limits({ n, refresh }) {
  const [budget, , onBudget] = useField(n.vram_budget || "");
  const [replicas, , onReplicas] = useField(String(n.max_replicas_per_model ?? 1));
  const save = (path, body, what) => async () => {
    await api(`/api/nodes/${enc(n.id)}/${path}`, { method: "PUT", body: body() });
    toast(`${what} saved`, "ok");
    await refresh();
  };
  const reset = (path, what) => async () => {
    await api(`/api/nodes/${enc(n.id)}/${path}`, { method: "DELETE" });
    toast(`${what} reset`, "ok");
    await refresh();
  };
  const byAdmin = (set) => (set ? html`<em class="muted"> (set by an admin)</em>` : "");
  return panel("Capacity", html`<div class="stack">
    <div class="field"><span>VRAM budget${byAdmin(n.vram_budget_manually_set)}</span>
      <div class="row wrap"><input name="vram-budget" placeholder="e.g. 80% or 12GiB" maxlength="32" value=${budget}
        onInput=${onBudget} aria-label="VRAM budget" />
        ${action("Save", save("vram-budget", () => ({ value: budget.trim() }), "VRAM budget"), { kind: "small" })}
        ${action("Reset", reset("vram-budget", "VRAM budget"), { kind: "ghost small" })}</div></div>
    <div class="field"><span>Max replicas per model${byAdmin(n.max_replicas_per_model_manually_set)}</span>
      <div class="row wrap"><input name="max-replicas" type="number" min="1" max="1024" value=${replicas}
        onInput=${onReplicas} aria-label="Max replicas per model" />
        ${action("Save", save("max-replicas-per-model", () => ({ value: Number(replicas) }), "max replicas"), { kind: "small" })}
        ${action("Reset", reset("max-replicas-per-model", "max replicas"), { kind: "ghost small" })}</div></div>
  </div>`);
}

function modelsTable(n, replicas, refresh) {
  if (!replicas.length) return empty("No model is loaded on this node.");
  const unload = (r) => async () => {
    try {
      await api(`/api/nodes/${enc(n.id)}/models/unload`, { method: "POST", body: { model_name: r.model_name } });
    } catch (err) {
      if (err.status === 404 || err.status === 405) throw new Error("unloading is not available on this frontend yet", { cause: err });
      throw err;
    }
    toast(`${r.model_name} unloaded`, "ok");
    await refresh();
  };
  return html`<div class="table-wrap"><table class="table">
    <thead><tr>${["Model", "Replica", "State", "Revision", "In flight", ""].map((t) => html`<th>${t}</th>`)}</tr></thead>
    <tbody>${replicas.map((r) => html`<tr data-model=${r.model_name}>
      <td>${r.model_name}</td><td>${`#${r.replica_index}`}</td><td>${pill(r.state)}</td>
      <td><code title=${r.config_revision}>${shortRevision(r.config_revision)}</code></td><td>${String(r.in_flight ?? 0)}</td>
      <td class="end">${dangerAction("Unload", `Unload ${r.model_name} from ${n.name}?`, unload(r), { kind: "ghost small" })}</td>
    </tr>`)}</tbody></table></div>`;
}

function Backends({ n }) {
  const { data: backends } = useApi(() => optional(`/api/nodes/${enc(n.id)}/backends`), { quiet: true });
  const [name, , onName] = useField("");
  if (backends === null || backends === undefined) return null; // the backend-management API is not on this frontend
  const list = Array.isArray(backends) ? backends : backends.backends || [];
  const op = (verb, backend) => async () => {
    const answer = await api(`/api/nodes/${enc(n.id)}/backends/${verb}`, { method: "POST", body: { backend } });
    toast(answer?.message || `${verb} started`, "ok"); // installs and upgrades run on: follow them in Activity
  };
  return panel("Backends", html`<div class="stack">
    ${list.length ? html`<ul class="list">${list.map((b) => {
      const id = b.name || b.backend || "?";
      return html`<li class="row between"><span><b>${id}</b>${b.version ? html`<span class="muted">${` ${b.version}`}</span>` : ""}</span>
        ${b.is_system ? html`<span class="tag">built in</span>` : html`<div class="row">
          ${action("Upgrade", op("upgrade", id), { kind: "ghost small" })}
          ${dangerAction("Delete", `Delete the backend ${id} from ${n.name}?`, op("delete", id))}</div>`}</li>`;
    })}</ul>` : empty("No backend installed.")}
    <div class="row wrap"><input name="backend" placeholder="backend name" aria-label="Backend to install" maxlength="255"
      value=${name} onInput=${onName} />${action("Install", () => op("install", name.trim())(), { kind: "small" })}</div>
  </div>`, { id: "backends" });
}

// The backend log of one model on this node, re-read every LOG_POLL_MS (a browser WebSocket cannot send the
// admin key as a bearer header, so the follow socket is for API clients). Hidden where the API is absent.
function BackendLog({ id, tick }) {
  const base = `/api/nodes/${enc(id)}/backend-logs`;
  const [models, setModels] = useState([]);
  const [chosen, setChosen] = useState("");
  const [text, setText] = useState("");
  useEffect(() => {
    optional(base).catch(() => null).then((listing) => {
      const names = (listing || []).map((m) => m.model_id).filter(Boolean);
      setModels((old) => (old.join("\n") === names.join("\n") ? old : names));
      setChosen((old) => (names.includes(old) ? old : names[0] || ""));
    });
  }, [base, tick]);
  useEffect(() => {
    if (!chosen) return undefined;
    let stopped = false;
    const read = async () => {
      let body;
      try {
        body = await api(`${base}/${enc(chosen)}`);
      } catch (err) {
        if (!stopped) setText(err.message); // e.g. the worker has no log of this model (any more)
        return;
      }
      if (stopped) return;
      setText((body.lines || []).map((l) => (typeof l === "string" ? l : l.text ?? JSON.stringify(l))).join("\n")
        || "(no output yet)");
    };
    read();
    const timer = setInterval(read, LOG_POLL_MS);
    return () => { stopped = true; clearInterval(timer); };
  }, [base, chosen]);
  useEffect(() => {
    const pre = document.querySelector("#backend-log pre");
    if (pre) pre.scrollTop = pre.scrollHeight;
  }, [text]);
  if (!models.length) return null;
  return panel("Backend log", html`<div class="stack">
    <select aria-label="Model whose backend log to follow" value=${chosen} onChange=${(e) => setChosen(e.currentTarget.value)}>
      ${models.map((m) => html`<option value=${m}>${m}</option>`)}</select>
    <pre class="log" aria-live="off">${text}</pre></div>`, { id: "backend-log" });
}

export default function NodePage({ params: [id] }) {
  const read = async () => {
    const [node, replicas] = await Promise.all([api(`/api/nodes/${enc(id)}`), api(`/api/nodes/${enc(id)}/models`)]);
    return { node, replicas };
  };
  const { data, error, reload } = useApi(read, { kinds: ["node", "replica", "load"], everyMs: 15000, quiet: true });
  if (!data) return error ? html`<div class="callout danger">${error.message}</div>` : null;
  const { node, replicas } = data;
  const post = (verb) => api(`/api/nodes/${enc(id)}/${verb}`, { method: "POST" });
  const resumable = node.status === "draining" || node.status === "offline";
  return html`
    ${pageHead(node.name, `${node.node_type || "backend"} node · ${node.id}`, pill(node.status),
      node.status === "pending" ? action("Approve", async () => { await post("approve"); await reload(); }, { kind: "primary" }) : null,
      resumable ? action("Resume", async () => { await post("resume"); toast("node resumed", "ok"); await reload(); })
        : dangerAction("Drain", `Drain ${node.name}? Its replicas are dropped and it takes no new work.`, async () => {
          await post("drain");
          toast("node draining", "ok");
          await reload();
        }, { kind: "" }),
      dangerAction("Delete", `Deregister ${node.name}? A running worker registers again on its next heartbeat.`, async () => {
        await api(`/api/nodes/${enc(id)}`, { method: "DELETE" });
        toast(`${node.name} deleted`, "ok");
        navigate("/app/nodes");
      }, { kind: "danger" }))}
    <div class="grid two">
      <div class="stack">${hardware(node)}<${Limits} key=${`${node.vram_budget}|${node.max_replicas_per_model}`} n=${node} refresh=${reload} /></div>
      <div class="stack">
        ${panel("Labels", html`<div><${Labels} n=${node} refresh=${reload} /></div>`, { id: "labels" })}
        ${panel("Models", html`<div>${modelsTable(node, replicas, reload)}</div>`, { id: "models" })}
        <${Backends} n=${node} /><${BackendLog} id=${id} tick=${replicas.map((r) => r.model_name).join(",")} />
      </div></div>`;
}
