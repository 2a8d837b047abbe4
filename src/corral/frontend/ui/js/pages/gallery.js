// Model gallery, two sections. "From the galleries": the models the configured galleries offer
// (GET /api/gallery/models: LOCALAI_GALLERIES, the reference's /models/available with the cluster sizing), each with
// the answer to "will it run here" — sized against the largest single healthy backend node ("Fits on dgx-01") —
// its variants (the other builds the index lists under `variants:`, each sized), and an install that downloads
// its files into the models directory and writes its config (POST /models/apply), its progress read from
// GET /models/jobs/<uuid>. "Configured": the models this cluster already has (GET /api/models), sized the same way,
// their variants (GET /api/models/variants/<id>) and an install that places and loads one
// (POST /api/model-configs/<name>/load) with its progress (GET /api/models/<name>/load-status).

import { html, useEffect, useState } from "../lib.js";
import { api, enc, optional } from "../api.js";
import { bytes } from "../format.js";
import { ActionButton, Bar, ErrorLine, notify, PageHead, Pill, usePoll } from "./kit.js";

const LOAD_POLL_MS = 1000;
const JOB_POLL_MS = 700;
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

// Gallery models matching a search (name, description, tag, gallery), fitting ones first.
export function filterCatalog(models, query) {
  const q = String(query || "").trim().toLowerCase();
  const rank = (m) => (m.fits === true ? 0 : m.fits === null || m.fits === undefined ? 1 : 2);
  return (models || [])
    .filter((m) => !q || [m.name, m.description, m.id, ...(m.tags || [])].some((s) => String(s || "").toLowerCase().includes(q)))
    .sort((a, b) => rank(a) - rank(b) || a.name.localeCompare(b.name));
}

// Where a gallery install stands (GET /models/jobs/<uuid>): running until processed, then done or failed.
export function jobPhase(job) {
  if (!job) return "idle";
  if (!job.processed) return "running";
  return job.error ? "failed" : "done";
}

// "file 1 of 2 · tiny.gguf: 1.0 MB of 4.2 MB" — what a running install is doing, from its job status.
export function jobLine(job) {
  if (!job) return "";
  if (job.error) return job.error;
  const sizes = job.downloaded_size ? `: ${job.downloaded_size}${job.file_size ? ` of ${job.file_size}` : ""}` : "";
  const file = job.file_name ? `${job.file_name}${sizes}` : "starting…";
  return job.phase && job.phase !== "done" ? `${job.phase} · ${file}` : file;
}

function CatalogVariants({ variants }) {
  if (!variants || !variants.length) return null;
  return html`<ul class="list variants" data-testid="catalog-variants">${variants.map((v) => html`<li key=${v.id} data-variant=${v.name}>
    <div class="row between wrap"><b>${v.name}</b>
      <span class=${`fit ${fitTone(v.fits)} small`}>${v.memory_bytes ? `${bytes(v.memory_bytes)} · ` : ""}${v.verdict}</span></div></li>`)}
  </ul>`;
}

function CatalogCard({ model, onInstalled }) {
  const [job, setJob] = useState(null);
  const phase = jobPhase(job);
  useEffect(() => {
    if (phase !== "running") return undefined;
    const timer = setTimeout(async () => {
      try {
        const next = await api(`/models/jobs/${enc(job.uuid)}`);
        setJob({ ...next, uuid: job.uuid });
        if (next.processed && !next.error) onInstalled();
      } catch (err) {
        setJob({ ...job, processed: true, error: err.message });
      }
    }, JOB_POLL_MS);
    return () => clearTimeout(timer);
  }, [job, phase, onInstalled]);
  const install = async () => {
    const answer = await api("/models/apply", { method: "POST", body: { id: model.id } });
    setJob({ uuid: answer.uuid, processed: false, progress: 0 });
    notify(`Installing ${model.name} from ${model.gallery.name}…`, "ok");
  };
  const blocked = !model.installable ? model.problem : model.fits === false ? model.verdict : undefined;
  const installed = phase === "done" || (model.installed && phase === "idle");
  return html`<article class="panel gallery-card" data-testid="catalog-model" data-model=${model.name} data-id=${model.id}
      data-fits=${String(model.fits)}>
    <header class="panel-head"><h2>${model.name}</h2><span class="muted small">${model.gallery.name}${model.license ? ` · ${model.license}` : ""}</span></header>
    <div class="stack">
      ${model.description ? html`<p class="small">${model.description}</p>` : null}
      ${(model.tags || []).length ? html`<div class="chips">${model.tags.map((t) => html`<span class="tag" key=${t}>${t}</span>`)}</div>` : null}
      <div class="row between wrap"><span class="muted small">${model.files.length} file(s)${model.memory_bytes ? ` · ${bytes(model.memory_bytes)}` : ""}${model.backend ? ` · ${model.backend}` : ""}</span>
        <span class=${`fit ${fitTone(model.fits)}`} data-testid="catalog-fit">${model.verdict || ""}</span></div>
      ${phase === "running" || phase === "failed" ? html`<div class="stack small" data-testid="catalog-progress" data-state=${phase}>
          <div class="row between"><${Pill} status=${phase === "failed" ? "failed" : job.status || "pending"} />
            <span class="muted">${Math.round(job.progress || 0)}%</span></div>
          <${Bar} pct=${job.progress} label=${`install of ${model.name}`} tone=${phase === "failed" ? "danger" : "info"} />
          <p class=${phase === "failed" ? "form-error small" : "muted small"} data-testid="catalog-job-line">${jobLine(job)}</p></div>` : null}
      <div class="row">
        ${installed ? html`<span data-testid="catalog-done"><${Pill} status="ok" label="installed" /></span>` : null}
        <${ActionButton} label=${phase === "failed" ? "Retry install" : installed ? "Reinstall" : "Install"} kind="primary small"
          testid="catalog-install" run=${install} disabled=${phase === "running" || Boolean(blocked)} title=${blocked} />
      </div>
      <${CatalogVariants} variants=${model.variants} />
    </div></article>`;
}

function Catalog({ query, onInstalled }) {
  const { data, error, reload } = usePoll(() => optional("/api/gallery/models"), MODELS_POLL_MS);
  if (error) return html`<${ErrorLine} error=${error} />`;
  if (data === undefined) return html`<p class="empty">Reading the galleries…</p>`;
  if (data === null || (!data.galleries.length && !data.errors.length)) {
    return html`<p class="empty" data-testid="catalog-none">No model gallery is configured: set LOCALAI_GALLERIES (--galleries).</p>`;
  }
  const models = filterCatalog(data.models, query);
  const installed = () => { reload(); onInstalled(); };
  return html`<div class="stack" data-testid="gallery-catalog">
    ${data.errors.map((e) => html`<div class="callout danger small" role="alert" data-testid="gallery-error" data-gallery=${e.gallery} key=${e.gallery}>${e.error}</div>`)}
    ${models.length ? html`<div class="grid cards">${models.map((m) => html`<${CatalogCard} key=${m.id} model=${m} onInstalled=${installed} />`)}</div>`
      : html`<p class="empty">${data.models.length ? "No gallery model matches." : "The galleries list no model."}</p>`}
  </div>`;
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
  const { data, error, reload } = usePoll(async () => {
    const [models, placed] = await Promise.all([api("/api/models"), api("/api/nodes/models").catch(() => [])]);
    return { ...models, placed: new Set((placed || []).map((r) => r.model_name)) };
  }, MODELS_POLL_MS);
  const [query, setQuery] = useState("");
  const [capability, setCapability] = useState("");
  const models = filterModels(data && data.models, query, capability);
  return html`<div class="stack gallery" data-testid="gallery">
    <${PageHead} title="Model gallery" subtitle="Will it run here? Every model sized against the cluster, with its variants; install downloads or loads it." />
    <${ErrorLine} error=${error} />
    ${data ? html`<p class="callout" data-testid="budget">${budgetLine(data.cluster)}</p>` : null}
    <div class="row wrap toolbar">
      <input type="search" placeholder="Search models" aria-label="Search models" value=${query} onInput=${(e) => setQuery(e.currentTarget.value)} />
      ${data ? html`<select aria-label="Capability" value=${capability} onChange=${(e) => setCapability(e.currentTarget.value)}>
        <option value="">Every capability</option>
        ${allCapabilities(data.models).map((c) => html`<option key=${c} value=${c}>${c}</option>`)}</select>` : null}
    </div>
    <section class="stack" aria-labelledby="gallery-from"><h2 id="gallery-from">From the galleries</h2>
      <${Catalog} query=${query} onInstalled=${reload} /></section>
    <section class="stack" aria-labelledby="gallery-configured"><h2 id="gallery-configured">Configured</h2>
    ${data ? (models.length ? html`<div class="grid cards">${models.map((m) => html`<${ModelCard} key=${m.name} model=${m} loaded=${data.placed.has(m.name)} />`)}</div>`
        : html`<p class="empty">${data.models.length ? "No model matches." : "No model is configured. Add a YAML file to the models directory, or install one from a gallery."}</p>`)
      : error ? null : html`<p class="empty">Reading models…</p>`}</section>
  </div>`;
}
