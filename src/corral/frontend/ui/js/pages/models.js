// Models: configured models and aliases, what each can do (capabilities), where each is loaded, load progress
// (bar + ETA), sizing against the cluster ("Fits on <node>"), YAML config edits (revision, pending cleanup),
// disable / enable, and a Try panel per model for its modalities (try.js).

import { api, enc, optional } from "../api.js";
import { h, slot } from "../dom.js";
import { bytes, shortRevision } from "../format.js";
import { follow } from "../live.js";
import { loadLine } from "../load.js";
import { action, empty, panel, pill, toast } from "../ui.js";
import { nodeNames, pageHead } from "./common.js";
import { canTry, tryPanel } from "./try.js";

const ACTIVE_POLL_MS = 1000; // while a load runs, its bar moves every second (its job row beats at 1 s)
const IDLE_POLL_MS = 2000; // a load started by a request elsewhere shows within this (loads have no start event)

function editor(name, onSaved, close) {
  const area = h("textarea", { class: "code", rows: 14, spellcheck: "false", "aria-label": `YAML of ${name}` }, "");
  const result = h("div", { class: "small", dataset: { testid: "save-result" } });
  const box = h("div", { class: "editor stack", dataset: { testid: "editor" } }, area, result,
    h("div", { class: "row" },
      action("Save", async () => {
        const answer = await api(`/api/model-configs/${enc(name)}`, { method: "PUT", body: area.value, type: "application/yaml" });
        result.replaceChildren(h("span", { class: "pill ok" }, "saved"),
          ` revision ${shortRevision(answer.config_revision)}`,
          answer.pending_cleanup != null ? ` · ${answer.pending_cleanup} old replica(s) pending cleanup` : "");
        await onSaved();
      }, { kind: "primary small" }),
      h("button", { type: "button", class: "btn ghost small", onclick: close }, "Close")));
  api(`/api/model-configs/${enc(name)}`).then((cfg) => { area.value = cfg.yaml; }).catch((err) => { result.textContent = err.message; });
  return box;
}

export default function modelsPage(root) {
  let data = { models: [], aliases: {} };
  let configs = new Map();
  let loads = [];
  let placed = [];
  const ready = new Set(); // loads seen running on this page that finished: shown as ready
  let editing = null;
  let timer = null;
  let stopped = false;
  // Try panels live outside the table, which re-renders on every poll: an answer (playing audio, an image) stays.
  const trying = new Map(); // model name -> its open panel
  const tries = h("div", { class: "stack tries", dataset: { testid: "tries" } });
  const calls = new AbortController(); // the panels' calls end with the page
  const urls = []; // object URLs of speech answers, revoked when the page is left
  function toggleTry(model) {
    const open = trying.get(model.name);
    if (open) {
      open.remove();
      trying.delete(model.name);
    } else {
      const panelEl = tryPanel(model, { signal: calls.signal, urls, onClose: () => toggleTry(model) });
      trying.set(model.name, panelEl);
      tries.prepend(panelEl);
      panelEl.scrollIntoView({ block: "nearest" });
    }
    return table.refresh();
  }

  const loadsSlot = slot(() => {
    const rows = [...loads, ...[...ready].filter((m) => !loads.some((l) => l.model === m)).map((m) => ({ model: m, state: "ready", progress: 100 }))];
    return rows.length ? h("div", { class: "stack" }, rows.map((l) => h("div", {}, h("b", {}, l.model), loadLine(l)))) : empty("No load is running.");
  });
  const table = slot(() => {
    if (!data.models.length) return empty("No model is configured. Add a YAML file to the models directory.");
    const where = (name) => placed.filter((r) => r.model_name === name);
    const rows = data.models.map((m) => {
      const cfg = configs.get(m.name) || {};
      const load = loads.find((l) => l.model === m.name);
      return [h("tr", { dataset: { model: m.name } },
        h("td", {}, h("b", {}, m.name), cfg.disabled ? [" ", pill("disabled")] : null,
          h("div", { class: "muted small" }, m.backend || "", cfg.config_revision ? ` · rev ${shortRevision(cfg.config_revision)}` : ""),
          m.capabilities?.length ? h("div", { class: "chips caps", dataset: { testid: "capabilities" } },
            m.capabilities.map((c) => h("span", { class: "tag", dataset: { capability: c } }, c))) : null),
        h("td", {}, m.memory_bytes ? bytes(m.memory_bytes) : "—"),
        h("td", {}, h("span", { class: `fit ${m.fits === true ? "ok" : m.fits === false ? "danger" : "muted"}`, dataset: { testid: "fit" } }, m.verdict || "")),
        h("td", {}, where(m.name).length ? where(m.name).map((r) => h("span", { class: "chip ok", dataset: { node: r.node_name } }, r.node_name)) : h("span", { class: "muted" }, load ? "" : "not loaded"),
          load ? loadLine(load) : ready.has(m.name) ? loadLine({ model: m.name, state: "ready", progress: 100 }) : null),
        h("td", { class: "end" }, h("div", { class: "row end" },
          canTry(m) ? action("Try", () => toggleTry(m), { kind: trying.has(m.name) ? "small active" : "small", testid: "try",
            title: `Try ${m.name}: ${m.capabilities.join(", ")}` }) : null,
          configs.size ? action("Edit", async () => { editing = editing === m.name ? null : m.name; await table.refresh(); }, { kind: "ghost small" }) : null,
          configs.size ? action(cfg.disabled ? "Enable" : "Disable", async () => {
            const answer = await api(`/api/model-configs/${enc(m.name)}/${cfg.disabled ? "enable" : "disable"}`, { method: "POST" });
            toast(`${m.name} ${answer.disabled ? "disabled" : "enabled"} · revision ${shortRevision(answer.config_revision)}`, "ok");
            await refresh();
          }, { kind: "ghost small" }) : null))),
      editing === m.name ? h("tr", { class: "editor-row" }, h("td", { colspan: 5 }, editor(m.name, refresh, () => { editing = null; table.refresh(); }))) : null];
    });
    return h("div", { class: "table-wrap" }, h("table", { class: "table" },
      h("thead", {}, h("tr", {}, ["Model", "Size", "Sizing", "Loaded on", ""].map((t) => h("th", {}, t)))), h("tbody", {}, rows)));
  });
  const aliases = slot(() => {
    const entries = Object.entries(data.aliases || {});
    return entries.length ? h("ul", { class: "list" }, entries.map(([a, t]) => h("li", {}, h("code", {}, a), " → ", t))) : empty("No aliases.");
  });
  const clusterLine = slot(() => (data.cluster ? h("p", { class: "muted" },
    `Sized against ${data.cluster.node_name} (${bytes(data.cluster.total_memory)} ${data.cluster.is_gpu ? "VRAM" : "RAM"}), the largest of ${data.cluster.node_count} healthy node(s).`)
    : h("p", { class: "muted" }, "No healthy backend node: sizes are checked against this host.")));

  async function readLoads() {
    const before = loads;
    loads = (await api("/api/models/loads")).loads;
    for (const old of before) {
      const ended = !loads.some((l) => l.model === old.model);
      if (ended && old.state !== "failed" && !old.error) ready.add(old.model); // a finished job row is deleted
    }
    for (const l of loads) ready.delete(l.model);
  }
  async function refresh() {
    const [models, cfgs, loaded, names] = await Promise.all([api("/api/models"), optional("/api/model-configs"),
      api("/api/nodes/models"), nodeNames()]);
    await readLoads();
    data = models;
    placed = loaded.map((r) => ({ ...r, node_name: names.get(r.node_id) || r.node_id.slice(0, 8) }));
    configs = new Map((cfgs?.configs || []).map((c) => [c.name, c]));
    if (editing) return Promise.all([loadsSlot.refresh(), aliases.refresh(), clusterLine.refresh()]);
    return Promise.all([table.refresh(), loadsSlot.refresh(), aliases.refresh(), clusterLine.refresh()]);
  }
  async function poll() {
    if (stopped) return;
    try {
      const had = loads.length;
      await readLoads();
      if (had !== loads.length) await refresh();
      else await Promise.all([editing ? null : table.refresh(), loadsSlot.refresh()]);
    } catch { /* the next tick retries */ }
    if (!stopped) timer = setTimeout(poll, loads.length ? ACTIVE_POLL_MS : IDLE_POLL_MS);
  }
  root.append(pageHead("Models", "Configured models, where they run, and their loads"), clusterLine.el,
    panel("Configured models", table.el, { id: "models" }), tries,
    h("div", { class: "grid two" }, panel("Loads", loadsSlot.el, { id: "loads" }), panel("Aliases", aliases.el)));
  refresh().catch((err) => toast(err.message, "danger")).finally(() => { timer = setTimeout(poll, ACTIVE_POLL_MS); });
  const off = follow(["replica", "load", "config", "node"], () => refresh().catch(() => {}));
  return () => {
    stopped = true; clearTimeout(timer); off(); calls.abort();
    for (const url of urls) URL.revokeObjectURL(url);
  };
}
