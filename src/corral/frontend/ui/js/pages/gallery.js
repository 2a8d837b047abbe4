// Model gallery: the models this cluster offers (GET /api/models), each with the answer to "will it run here"
// sized against the cluster — the largest single healthy backend node, its VRAM budget applied, a GPU node
// before a CPU one — and naming that node ("Fits on dgx-01"); its variants (GET /api/models/variants/<id>:
// the builds for other hardware, the recommended one marked) and an install that places and loads it
// (POST /api/model-configs/<name>/load) with its progress (GET /api/models/<name>/load-status).

import { html, useEffect, useState } from "../lib.js";
import { api, enc } from "../api.js";
import { bytes } from "../format.js";
import { ActionButton, Bar, ErrorLine, notify, PageHead, Pill, usePoll } from "./kit.js";

const LOAD_POLL_MS = 1000;
const MODELS_POLL_MS = 15_000;
const NO_JOB_MISSES = 30; // polls without a load job nor a replica before an install is called failed

// "sized against gpu-a (24 GiB VRAM), the largest of 3 healthy nodes" — or this host when there is no cluster.
export function budgetLine(cluster) {
  if (!cluster || !cluster.enabled) return "Sized against this host: no healthy backend node is registered.";
  const kind = cluster.is_gpu ? "VRAM" : "RAM";
  const of = cluster.node_count > 1 ? `, the largest of ${cluster.node_count} healthy nodes` : ", the only healthy node";
  return `Sized against ${cluster.node_name} (${bytes(cluster.total_memory)} ${kind})${of}.`;
}

export function fitTone(fits) {
  return fits === true ? "ok" : fits === false ? "danger" : "muted";
}

// Models matching a search (name, backend or capability) and a capability filter, fitting ones first.
export function filterModels(models, query, capability) {
  const q = String(query || "").trim().toLowerCase();
  const rank = (m) => (m.fits === true ? 0 : m.fits === null || m.fits === undefined ? 1 : 2);
  return (models || [])
    .filter((m) => !capability || (m.capabilities || []).includes(capability))
    .filter((m) => !q || [m.name, m.backend, ...(m.capabilities || [])].some((s) => String(s || "").toLowerCase().includes(q)))
    .sort((a, b) => rank(a) - rank(b) || a.name.localeCompare(b.name));
}

export function allCapabilities(models) {
  return [...new Set((models || []).flatMap((m) => m.capabilities || []))].sort();
}

// Where a load stands: "ready" once loaded, "failed" with its error, else running with a percentage.
export function loadPhase(status) {
  if (!status) return "idle";
  if (status.state === "loaded" || status.state === "ready") return "ready";
  if (status.state === "failed" || status.error) return "failed";
  return "running";
}

function Variants({ name }) {
  const { data, error } = usePoll(() => api(`/api/models/variants/${enc(name)}`), 0, name);
  if (error) return html`<p class="form-error small">${error}</p>`;
  if (!data) return html`<p class="muted small">Reading variants…</p>`;
  return html`<ul class="list variants" data-testid="variants">${data.variants.map((v) => html`<li key=${v.name}
      data-variant=${v.name} data-compatible=${String(v.compatible)}>
    <div class="row between wrap"><span><b>${v.name}</b>${v.name === data.recommended ? html` <span class="pill ok">recommended</span>` : null}
      ${v.capability ? html` <span class="tag">${v.capability}</span>` : null}
      ${v.compatible ? null : html` <span class="muted small">no node can run this build</span>`}</span>
      <span class=${`fit ${fitTone(v.fits)} small`}>${v.memory_bytes ? `${bytes(v.memory_bytes)} · ` : ""}${v.verdict}</span></div></li>`)}
  </ul>`;
}

function ModelCard({ model, loaded }) {
  const [open, setOpen] = useState(false);
  const [status, setStatus] = useState(loaded ? { state: "loaded" } : null);
  const phase = loadPhase(status);
  useEffect(() => { if (loaded && phase === "idle") setStatus({ state: "loaded" }); }, [loaded, phase]);
  useEffect(() => {
    if (phase !== "running") return undefined;
    const timer = setTimeout(async () => {
      try {
        setStatus({ ...(await api(`/api/models/${enc(model.name)}/load-status`)), misses: 0 });
      } catch (err) {
        if (err.status !== 404) { setStatus({ state: "failed", error: err.message }); return; }
        // No load job: not started yet, or finished. Loaded once a replica of it serves.
        const placed = await api("/api/nodes/models").catch(() => []);
        const misses = (status.misses || 0) + 1;
        if (placed.some((r) => r.model_name === model.name)) setStatus({ state: "loaded" });
        else if (misses > NO_JOB_MISSES) setStatus({ state: "failed", error: "no load is running and no replica serves it: see Activity" });
        else setStatus({ ...status, misses });
      }
    }, LOAD_POLL_MS);
    return () => clearTimeout(timer);
  }, [status, phase, model.name]);
  const install = async () => {
    const answer = await api(`/api/model-configs/${enc(model.name)}/load`, { method: "POST" });
    setStatus(answer.state === "loaded" ? { state: "loaded" } : { state: answer.state || "pending", progress: 0 });
    notify(answer.state === "loaded" ? `${model.name} is already running.` : `Installing ${model.name} on the cluster…`, "ok");
  };
  return html`<article class="panel gallery-card" data-testid="gallery-model" data-model=${model.name} data-fits=${String(model.fits)}>
    <header class="panel-head"><h2>${model.name}</h2><span class="muted small">${model.backend || ""}</span></header>
    <div class="stack">
      ${(model.capabilities || []).length ? html`<div class="chips">${model.capabilities.map((c) => html`<span class="tag" key=${c}>${c}</span>`)}</div>` : null}
      <div class="row between wrap"><span class="muted small">${model.memory_bytes ? `needs ${bytes(model.memory_bytes)}` : ""}</span>
        <span class=${`fit ${fitTone(model.fits)}`} data-testid="fit">${model.verdict || ""}</span></div>
      ${phase === "running" || phase === "failed" ? html`<div class="stack small" data-testid="install-progress" data-state=${phase}>
          <div class="row between"><${Pill} status=${phase === "failed" ? "failed" : status.state} />
            <span class="muted">${Math.round(status.progress || 0)}%${status.node ? ` on ${status.node}` : ""}</span></div>
          <${Bar} pct=${status.progress} label=${`install of ${model.name}`} tone=${phase === "failed" ? "danger" : "info"} />
          ${status.error ? html`<p class="form-error small">${status.error}</p>` : null}</div>` : null}
      <div class="row">
        ${phase === "ready" ? html`<span data-testid="install-done"><${Pill} status="ok" label="installed and running" /></span>`
          : html`<${ActionButton} label=${phase === "failed" ? "Retry install" : "Install"} kind="primary small" testid="gallery-install"
              run=${install} disabled=${phase === "running" || model.fits === false} title=${model.fits === false ? model.verdict : undefined} />`}
        <button type="button" class="btn ghost small" data-testid="variants-toggle" aria-expanded=${String(open)}
          onClick=${() => setOpen(!open)}>${open ? "Hide variants" : "Variants"}</button>
      </div>
      ${open ? html`<${Variants} name=${model.name} />` : null}
    </div></article>`;
}

export default function GalleryPage() {
  const { data, error } = usePoll(async () => {
    const [models, placed] = await Promise.all([api("/api/models"), api("/api/nodes/models").catch(() => [])]);
    return { ...models, placed: new Set((placed || []).map((r) => r.model_name)) };
  }, MODELS_POLL_MS);
  const [query, setQuery] = useState("");
  const [capability, setCapability] = useState("");
  const models = filterModels(data && data.models, query, capability);
  return html`<div class="stack gallery" data-testid="gallery">
    <${PageHead} title="Model gallery" subtitle="Will it run here? Every model sized against the cluster, with its variants; install places and loads it." />
    <${ErrorLine} error=${error} />
    ${data ? html`<p class="callout" data-testid="budget">${budgetLine(data.cluster)}</p>
      <div class="row wrap toolbar">
        <input type="search" placeholder="Search models" aria-label="Search models" value=${query} onInput=${(e) => setQuery(e.currentTarget.value)} />
        <select aria-label="Capability" value=${capability} onChange=${(e) => setCapability(e.currentTarget.value)}>
          <option value="">Every capability</option>
          ${allCapabilities(data.models).map((c) => html`<option key=${c} value=${c}>${c}</option>`)}</select>
      </div>
      ${models.length ? html`<div class="grid cards">${models.map((m) => html`<${ModelCard} key=${m.name} model=${m} loaded=${data.placed.has(m.name)} />`)}</div>`
        : html`<p class="empty">${data.models.length ? "No model matches." : "No model is configured. Add a YAML file to the models directory."}</p>`}`
      : error ? null : html`<p class="empty">Reading models…</p>`}
  </div>`;
}
