// Backends: what each backend node has installed (GET /api/nodes/<id>/backends, asked of the worker), and the
// gallery's operations — install on every chosen node at once (POST /api/backends/install: one job, rolled up
// "2 of 5 nodes done") or on one, upgrade, delete. Upgrade and delete ask first: they stop the processes
// running that backend. An install's progress follows its job (GET /api/backends/job/<id>) here and on the
// operations strip.

import { html, useEffect, useRef, useState } from "../lib.js";
import { api, enc } from "../api.js";
import { ago } from "../format.js";
import { ActionButton, Bar, confirmed, ErrorLine, notify, PageHead, Pill, usePoll } from "./kit.js";

const JOB_POLL_MS = 1000;
const NODES_POLL_MS = 15_000;

// Nodes that run backends (agent nodes run none), the usable ones first, then by name.
export function backendNodes(nodes) {
  return (nodes || []).filter((n) => (n.node_type || "backend") !== "agent")
    .sort((a, b) => (a.status !== "healthy") - (b.status !== "healthy") || String(a.name).localeCompare(String(b.name)));
}

// Can an install go to this node now? (the API refuses pending and draining nodes)
export function installable(node) {
  return node.status === "healthy";
}

// The body of an install: one node -> its own route; several -> the fan-out.
export function installRequest(backend, nodeIds) {
  const name = String(backend || "").trim();
  if (!name) throw new Error("backend: give the name of a backend from the gallery");
  if (!nodeIds.length) throw new Error("nodes: choose at least one node to install on");
  if (nodeIds.length === 1) return { path: `/api/nodes/${enc(nodeIds[0])}/backends/install`, body: { backend: name } };
  return { path: "/api/backends/install", body: { backend: name, node_ids: nodeIds } };
}

// A job's line: its roll-up for a fan-out, else its state and message.
export function jobLine(job) {
  if (!job) return "";
  if (job.summary) return job.summary;
  return [job.state, job.message].filter(Boolean).join(": ");
}

// Names of every backend installed anywhere (the install field's suggestions).
export function knownBackends(lists) {
  return [...new Set(Object.values(lists || {}).flatMap((l) => (Array.isArray(l) ? l.map((b) => b.name) : [])))].sort();
}

function Job({ job }) {
  const done = job.processed;
  const failed = done && (job.status === "failed" || job.failed > 0 || job.error);
  return html`<div class="stack job" data-testid="backend-job" data-job=${job.jobID} data-done=${String(Boolean(done))}>
    <div class="row between wrap"><span><b>${job.gallery_element_name || job.backend}</b> <span class="muted small">${jobLine(job)}</span></span>
      <${Pill} status=${failed ? "failed" : done ? "done" : "running"} label=${failed ? "failed" : done ? "done" : `${Math.round(job.progress || 0)}%`} /></div>
    <${Bar} pct=${done ? 100 : job.progress} label=${`install of ${job.gallery_element_name}`} tone=${failed ? "danger" : done ? "ok" : "info"} />
    ${(job.nodes || []).map((n) => html`<div class="row between small" key=${n.node_id} data-testid="backend-job-node" data-node=${n.node_name}>
      <span>${n.node_name}</span><span>${n.error || n.file_name || ""}</span><${Pill} status=${n.state} /></div>`)}
  </div>`;
}

function useJobs(onFinished) {
  const [jobs, setJobs] = useState([]); // [{jobID, ...view}]
  const finished = useRef(onFinished);
  finished.current = onFinished;
  useEffect(() => {
    const open = jobs.filter((j) => !j.processed);
    if (!open.length) return undefined;
    const timer = setTimeout(async () => {
      const views = await Promise.all(open.map((j) => api(`/api/backends/job/${enc(j.jobID)}`).catch(() => j)));
      setJobs((all) => all.map((j) => views.find((v) => v.jobID === j.jobID) || j));
      if (views.some((v) => v.processed)) finished.current();
    }, JOB_POLL_MS);
    return () => clearTimeout(timer);
  }, [jobs]);
  const add = (jobID, name) => setJobs((all) => [{ jobID, gallery_element_name: name, progress: 0, processed: false }, ...all].slice(0, 10));
  return [jobs, add];
}

function NodeBackends({ node, list, error, onAction }) {
  const op = (verb, backend) => async () => {
    const question = verb === "delete"
      ? `Delete backend ${backend} from ${node.name}? Every model it runs there is stopped and its replicas removed.`
      : `Upgrade backend ${backend} on ${node.name}? The models it runs there are stopped and start again on the new version.`;
    if (!(await confirmed(question, verb === "delete" ? "Delete" : "Upgrade"))) return;
    const answer = await api(`/api/nodes/${enc(node.id)}/backends/${verb}`, { method: "POST", body: { backend } });
    notify(answer.message || `${verb} of ${backend} on ${node.name} started`, "ok");
    onAction(answer.jobID, backend);
  };
  return html`<section class="panel" data-testid="backend-node" data-node=${node.name}>
    <header class="panel-head"><h2><a href=${`/app/nodes/${node.id}`} data-link="">${node.name}</a></h2><${Pill} status=${node.status} /></header>
    ${error ? html`<p class="callout danger small">${error}</p>` : list === undefined ? html`<p class="empty">Asking the worker…</p>`
      : !list.length ? html`<p class="empty">No backend installed.</p>`
      : html`<ul class="list">${list.map((b) => html`<li key=${b.name} data-testid="backend-row" data-backend=${b.name}>
          <div class="row between wrap">
            <span><b>${b.name}</b>${b.version ? html` <span class="muted">${b.version}</span>` : null}
              ${b.is_system ? html` <span class="tag">built in</span>` : null}
              ${b.installed_at ? html` <span class="muted small">installed ${ago(b.installed_at)}</span>` : null}</span>
            ${b.is_system ? null : html`<div class="row">
              <${ActionButton} label="Upgrade" kind="ghost small" testid="backend-upgrade" run=${op("upgrade", b.name)} />
              <${ActionButton} label="Delete" kind="danger small" testid="backend-delete" run=${op("delete", b.name)} /></div>`}
          </div></li>`)}</ul>`}
  </section>`;
}

export default function BackendsPage() {
  const nodesPoll = usePoll(() => api("/api/nodes"), NODES_POLL_MS);
  const nodes = backendNodes(nodesPoll.data);
  const [lists, setLists] = useState({}); // node id -> list | {error}
  const [name, setName] = useState("");
  const [chosen, setChosen] = useState(null); // node ids; null: every healthy node
  const [problem, setProblem] = useState("");
  const readLists = async () => {
    const entries = await Promise.all(backendNodes((await api("/api/nodes"))).map(async (n) => {
      try { return [n.id, await api(`/api/nodes/${enc(n.id)}/backends`)]; } catch (err) { return [n.id, { error: err.message }]; }
    }));
    setLists(Object.fromEntries(entries));
  };
  const [jobs, addJob] = useJobs(readLists);
  const nodeKey = nodes.map((n) => `${n.id}:${n.status}`).join(",");
  useEffect(() => { readLists(); }, [nodeKey]);
  const targets = chosen ?? nodes.filter(installable).map((n) => n.id);
  const toggle = (id) => setChosen((c) => {
    const now = new Set(c ?? nodes.filter(installable).map((n) => n.id));
    if (now.has(id)) now.delete(id); else now.add(id);
    return [...now];
  });
  const install = async () => {
    setProblem("");
    let req;
    try { req = installRequest(name, targets); } catch (err) { setProblem(err.message); return; }
    const answer = await api(req.path, { method: "POST", body: req.body });
    notify(answer.message || "installation started", "ok");
    addJob(answer.jobID, req.body.backend);
    setName("");
  };
  const onAction = (jobID, backend) => { if (jobID) addJob(jobID, backend); readLists(); };
  const suggestions = knownBackends(Object.fromEntries(Object.entries(lists).filter(([, l]) => Array.isArray(l))));

  return html`<div class="stack backends" data-testid="backends">
    <${PageHead} title="Backends" subtitle="Installed backends per node, and installs from the configured backend galleries.">
      <${ActionButton} label="Refresh" kind="ghost" testid="backends-refresh" run=${readLists} />
    <//>
    <${ErrorLine} error=${nodesPoll.error} />
    <section class="panel" data-testid="backend-install"><header class="panel-head"><h2>Install a backend</h2></header>
      <form class="stack" onSubmit=${(e) => { e.preventDefault(); }}>
        <label class="field"><span>Backend (a name from the gallery)</span>
          <input name="backend" list="backend-names" maxlength="255" placeholder="e.g. piper" value=${name}
            data-testid="backend-install-name" onInput=${(e) => setName(e.currentTarget.value)} /></label>
        <datalist id="backend-names">${suggestions.map((s) => html`<option key=${s} value=${s} />`)}</datalist>
        <fieldset class="row wrap nodes-pick"><legend class="small muted">On nodes</legend>
          ${nodes.map((n) => html`<label class="field check inline" key=${n.id}>
            <input type="checkbox" data-testid="backend-install-node" data-node=${n.name} disabled=${!installable(n)}
              checked=${targets.includes(n.id)} onChange=${() => toggle(n.id)} /><span>${n.name}${installable(n) ? "" : ` (${n.status})`}</span></label>`)}
        </fieldset>
        ${problem ? html`<p class="form-error" role="alert">${problem}</p>` : null}
        <div class="row"><${ActionButton} label=${targets.length > 1 ? `Install on ${targets.length} nodes` : "Install"} kind="primary"
          testid="backend-install-submit" run=${install} /></div>
      </form>
      ${jobs.length ? html`<div class="stack">${jobs.map((j) => html`<${Job} key=${j.jobID} job=${j} />`)}</div>` : null}
    </section>
    ${nodesPoll.data === undefined ? html`<p class="empty">Reading nodes…</p>` : !nodes.length ? html`<p class="empty">No backend node is registered.</p>`
      : html`<div class="grid two">${nodes.map((n) => {
        const l = lists[n.id];
        return html`<${NodeBackends} key=${n.id} node=${n} list=${Array.isArray(l) ? l : undefined} error=${l && l.error}
          onAction=${onAction} />`;
      })}</div>`}
  </div>`;
}
