// Models: configured models and aliases, what each can do (capabilities), where each is loaded, load progress
// (bar + ETA), sizing against the cluster ("Fits on <node>"), YAML config edits (revision, pending cleanup),
// disable / enable, and a Try panel per model for its modalities (try.js).

import { api, enc, optional } from "../api.js";
import { html, useEffect, useRef, useState } from "../lib.js";
import { bytes, shortRevision } from "../format.js";
import { useFollow } from "../live.js";
import { loadLine } from "../load.js";
import { action, dangerAction, empty, panel, pill, toast } from "../ui.js";
import { nodeNames, pageHead } from "./common.js";
import { TryPanel, canTry } from "./try.js";

const ACTIVE_POLL_MS = 1000; // while a load runs, its bar moves every second (its job row beats at 1 s)
const IDLE_POLL_MS = 2000; // a load started by a request elsewhere shows within this (loads have no start event)

function Editor({ name, onSaved, onClose }) {
  const [yaml, setYaml] = useState("");
  const [result, setResult] = useState(null);
  useEffect(() => {
    api(`/api/model-configs/${enc(name)}`).then((cfg) => setYaml(cfg.yaml)).catch((err) => setResult(err.message));
  }, [name]);
  const save = async () => {
    const answer = await api(`/api/model-configs/${enc(name)}`, { method: "PUT", body: yaml, type: "application/yaml" });
    setResult(html`<span class="pill ok">saved</span>${` revision ${shortRevision(answer.config_revision)}`}${
      answer.pending_cleanup != null ? ` · ${answer.pending_cleanup} old replica(s) pending cleanup` : ""}`);
    await onSaved();
  };
  return html`<div class="editor stack" data-testid="editor">
    <textarea class="code" rows="14" spellcheck="false" aria-label=${`YAML of ${name}`} value=${yaml}
      onInput=${(e) => setYaml(e.currentTarget.value)}></textarea>
    <div class="small" data-testid="save-result">${result}</div>
    <div class="row">${action("Save", save, { kind: "primary small" })}
      <button type="button" class="btn ghost small" onClick=${onClose}>Close</button></div></div>`;
}

// The running loads, polled: every ACTIVE_POLL_MS while one runs, else IDLE_POLL_MS. A load seen running here
// that ended without an error is shown as ready (its job row is deleted when it finishes).
function useLoads(onCountChange) {
  const [loads, setLoads] = useState({ running: [], ready: [] });
  const latest = useRef(loads);
  const changed = useRef(onCountChange);
  changed.current = onCountChange;
  useEffect(() => {
    let stopped = false;
    let timer = null;
    const poll = async () => {
      try {
        const running = (await api("/api/models/loads")).loads;
        const before = latest.current;
        const ready = new Set(before.ready);
        for (const old of before.running) {
          if (!running.some((l) => l.model === old.model) && old.state !== "failed" && !old.error) ready.add(old.model);
        }
        for (const l of running) ready.delete(l.model);
        const next = { running, ready: [...ready] };
        if (stopped) return;
        latest.current = next;
        setLoads(next);
        if (before.running.length !== running.length) changed.current();
      } catch { /* the next tick retries */ }
      if (!stopped) timer = setTimeout(poll, latest.current.running.length ? ACTIVE_POLL_MS : IDLE_POLL_MS);
    };
    poll();
    return () => { stopped = true; clearTimeout(timer); };
  }, []);
  return loads;
}

async function readModels() {
  const [models, cfgs, loaded, names] = await Promise.all([api("/api/models"), optional("/api/model-configs"),
    api("/api/nodes/models"), nodeNames()]);
  return {
    models,
    placed: loaded.map((r) => ({ ...r, node_name: names.get(r.node_id) || r.node_id.slice(0, 8) })),
    configs: new Map((cfgs?.configs || []).map((c) => [c.name, c])),
  };
}

export default function ModelsPage() {
  const [state, setState] = useState({ models: { models: [], aliases: {} }, placed: [], configs: new Map() });
  const [editing, setEditing] = useState(null);
  const [trying, setTrying] = useState([]); // models whose Try panel is open, newest first
  const refresh = async () => setState(await readModels());
  const loads = useLoads(() => refresh().catch(() => {}));
  useEffect(() => { refresh().catch((err) => toast(err.message, "danger")); }, []);
  useFollow(["replica", "load", "config", "node"], () => refresh().catch(() => {}));
  const calls = useRef(null); // the Try panels' calls end with the page
  if (!calls.current) calls.current = new AbortController();
  const urls = useRef([]); // object URLs of speech answers, revoked when the page is left
  useEffect(() => () => {
    calls.current.abort();
    for (const url of urls.current) URL.revokeObjectURL(url);
  }, []);

  const { models: data, placed, configs } = state;
  const toggleTry = (m) => setTrying((open) => (open.some((x) => x.name === m.name) ? open.filter((x) => x.name !== m.name) : [m, ...open]));
  const loadRows = [...loads.running, ...loads.ready.filter((m) => !loads.running.some((l) => l.model === m))
    .map((m) => ({ model: m, state: "ready", progress: 100 }))];

  const row = (m) => {
    const cfg = configs.get(m.name) || {};
    const load = loads.running.find((l) => l.model === m.name);
    const where = placed.filter((r) => r.model_name === m.name);
    const open = trying.some((x) => x.name === m.name);
    const toggleDisabled = async () => {
      const answer = await api(`/api/model-configs/${enc(m.name)}/${cfg.disabled ? "enable" : "disable"}`, { method: "POST" });
      toast(`${m.name} ${answer.disabled ? "disabled" : "enabled"} · revision ${shortRevision(answer.config_revision)}`, "ok");
      await refresh();
    };
    return html`<tr data-model=${m.name}>
      <td><b>${m.name}</b>${cfg.disabled ? html` ${pill("disabled")}` : null}
        <div class="muted small">${m.backend || ""}${cfg.config_revision ? ` · rev ${shortRevision(cfg.config_revision)}` : ""}</div>
        ${m.capabilities?.length ? html`<div class="chips caps" data-testid="capabilities">
          ${m.capabilities.map((c) => html`<span class="tag" data-capability=${c}>${c}</span>`)}</div>` : null}</td>
      <td>${m.memory_bytes ? bytes(m.memory_bytes) : "—"}</td>
      <td><span class="fit ${m.fits === true ? "ok" : m.fits === false ? "danger" : "muted"}" data-testid="fit">${m.verdict || ""}</span></td>
      <td>${where.length ? where.map((r) => html`<span class="chip ok" data-node=${r.node_name}>${r.node_name}</span>`)
        : html`<span class="muted">${load ? "" : "not loaded"}</span>`}
        ${load ? loadLine(load) : loads.ready.includes(m.name) ? loadLine({ model: m.name, state: "ready", progress: 100 }) : null}</td>
      <td class="end"><div class="row end">
        ${canTry(m) ? action("Try", async () => toggleTry(m), { kind: open ? "small active" : "small", testid: "try",
          title: `Try ${m.name}: ${m.capabilities.join(", ")}` }) : null}
        ${configs.size ? action("Edit", async () => setEditing(editing === m.name ? null : m.name), { kind: "ghost small" }) : null}
        ${!configs.size ? null : cfg.disabled ? action("Enable", toggleDisabled, { kind: "ghost small" })
    : dangerAction("Disable", `Disable ${m.name}? Its replicas stop and requests for it get 404 until it is enabled again.`,
      toggleDisabled)}
      </div></td></tr>
      ${editing === m.name ? html`<tr class="editor-row"><td colspan="5">
        <${Editor} name=${m.name} onSaved=${refresh} onClose=${() => setEditing(null)} /></td></tr>` : null}`;
  };
  const aliases = Object.entries(data.aliases || {});
  const c = data.cluster;
  return html`
    ${pageHead("Models", "Configured models, where they run, and their loads")}
    <p class="muted">${c ? `Sized against ${c.node_name} (${bytes(c.total_memory)} ${c.is_gpu ? "VRAM" : "RAM"}), the largest of ${c.node_count} healthy node(s).`
      : "No healthy backend node: sizes are checked against this host."}</p>
    ${panel("Configured models", data.models.length ? html`<div class="table-wrap"><table class="table">
      <thead><tr>${["Model", "Size", "Sizing", "Loaded on", ""].map((t) => html`<th>${t}</th>`)}</tr></thead>
      <tbody>${data.models.map(row)}</tbody></table></div>`
      : empty("No model is configured. Add a YAML file to the models directory."), { id: "models" })}
    <div class="stack tries" data-testid="tries">${trying.map((m) => html`<${TryPanel} key=${m.name} model=${m}
      signal=${calls.current.signal} urls=${urls.current} onClose=${() => toggleTry(m)} />`)}</div>
    <div class="grid two">
      ${panel("Loads", loadRows.length ? html`<div class="stack">${loadRows.map((l) => html`<div><b>${l.model}</b>${loadLine(l)}</div>`)}</div>`
        : empty("No load is running."), { id: "loads" })}
      ${panel("Aliases", aliases.length ? html`<ul class="list">${aliases.map(([a, t]) => html`<li><code>${a}</code> → ${t}</li>`)}</ul>`
        : empty("No aliases."))}</div>`;
}
