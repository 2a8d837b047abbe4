// Scheduling: rules (target, status, shadowed), create / edit / delete with a completing node-selector
// field, and placement explain ("why this node / why no node") for a model.

import { api, enc } from "../api.js";
import { html, useEffect, useRef, useState } from "../lib.js";
import { useApi } from "../hooks.js";
import { action, dangerAction, empty, option, panel, pill, toast } from "../ui.js";
import { SelectorField, parseSelector, selectorText } from "../complete.js";
import { pageHead } from "./common.js";
import { RoutesPanel } from "./routes_panel.js";

const POLICIES = [["", "default"], ["round_robin", "round robin"], ["prefix_cache", "prefix cache"]];
// issue 25: autoscaling on load; an empty field is off (cooldown: the frontend's CORRAL_AUTOSCALE_COOLDOWN)
const SCALING = [["target_queue_wait_s", "Target queue wait p95 (s)"], ["target_ttft_s", "Target time to first token p95 (s)"],
  ["scale_down_idle_s", "Scale down after idle (s)"], ["cooldown_s", "Cooldown between actions (s)"]];
const SCHEDULE_HINT = '[{"days": ["mon","tue","wed","thu","fri"], "from": "09:00", "to": "18:00", "tz": "Europe/Paris", "min_replicas": 2}]';

// The autoscaling part of a rule's body from the form's fields (strings); an empty field is left out.
export function scalingValues(fields) {
  const out = {};
  for (const [key] of SCALING) if (String(fields[key] ?? "").trim() !== "") out[key] = Number(fields[key]);
  if (String(fields.schedules ?? "").trim()) {
    try { out.schedules = JSON.parse(fields.schedules); } catch { throw new Error(`schedules: not valid JSON; e.g. ${SCHEDULE_HINT}`); }
  }
  return out;
}

function scalingSummary(r) {
  const parts = [r.target_queue_wait_s != null ? `wait ≤ ${r.target_queue_wait_s}s` : "",
    r.target_ttft_s != null ? `TTFT ≤ ${r.target_ttft_s}s` : "", r.scale_down_idle_s != null ? `idle ${r.scale_down_idle_s}s` : "",
    r.schedules?.length ? `${r.schedules.length} schedule(s)` : ""].filter(Boolean);
  return parts.length ? html`<div class="muted small" data-testid="autoscale-summary">${parts.join(" · ")}</div>` : null;
}

function RuleForm({ catalog, models, rule, onDone }) {
  const [fields, setFields] = useState(() => ({
    model_name: rule?.model_name || "", node_selector: selectorText(rule?.node_selector),
    min_replicas: String(rule?.min_replicas ?? 0), max_replicas: String(rule?.max_replicas ?? 0),
    spread_all: Boolean(rule?.spread_all), route_policy: rule?.route_policy || "",
    ...Object.fromEntries(SCALING.map(([key]) => [key, rule?.[key] != null ? String(rule[key]) : ""])),
    schedules: rule?.schedules ? JSON.stringify(rule.schedules) : "",
  }));
  const [error, setError] = useState("");
  const form = useRef(null);
  useEffect(() => { form.current?.querySelector("input:not([readonly])")?.focus(); }, []);
  const set = (name) => (event) => {
    const el = event.currentTarget;
    setFields((f) => ({ ...f, [name]: el.type === "checkbox" ? el.checked : el.value }));
  };
  const submit = async (event) => {
    event.preventDefault();
    setError("");
    try {
      const body = { model_name: fields.model_name.trim(), node_selector: parseSelector(fields.node_selector),
        min_replicas: Number(fields.min_replicas), max_replicas: Number(fields.max_replicas), spread_all: fields.spread_all,
        route_policy: fields.route_policy, ...scalingValues(fields) };
      if (body.spread_all) { body.min_replicas = 0; body.max_replicas = 0; }
      await api("/api/nodes/scheduling", { method: "POST", body });
      toast(`rule for ${body.model_name} saved`, "ok");
      onDone(true);
    } catch (err) {
      setError(err.message);
    }
  };
  const labelled = (label, control, cls = "field") => html`<label class=${cls}><span>${label}</span>${control}</label>`;
  return html`<form class="stack rule-form" data-testid="rule-form" ref=${form} onSubmit=${submit}>
    <datalist id="model-names">${models.map((m) => html`<option value=${m} />`)}</datalist>
    <div class="grid form-grid">
      ${labelled("Model or alias", html`<input name="model_name" required maxlength="255" list="model-names"
        value=${fields.model_name} onInput=${set("model_name")} readonly=${Boolean(rule)} />`)}
      ${labelled("Node selector", html`<${SelectorField} labels=${catalog} value=${fields.node_selector}
        onChange=${(text) => setFields((f) => ({ ...f, node_selector: text }))} />`)}
      ${labelled("Min replicas", html`<input name="min_replicas" type="number" min="0" max="1024" value=${fields.min_replicas}
        onInput=${set("min_replicas")} />`)}
      ${labelled("Max replicas", html`<input name="max_replicas" type="number" min="0" max="1024" value=${fields.max_replicas}
        onInput=${set("max_replicas")} />`)}
      ${labelled("Route policy", html`<select name="route_policy" value=${fields.route_policy} onChange=${set("route_policy")}>
        ${POLICIES.map(([v, l]) => html`<option value=${v}>${l}</option>`)}</select>`)}
      <label class="field check"><input name="spread_all" type="checkbox" checked=${fields.spread_all} onChange=${set("spread_all")} />
        <span>One replica on every matching node</span></label></div>
    <fieldset class="stack" data-testid="autoscale-fields"><legend>Autoscaling on load</legend>
      <div class="grid form-grid">
        ${SCALING.map(([key, label]) => labelled(label, html`<input name=${key} type="number" min="0" step="any" placeholder="off"
          value=${fields[key]} onInput=${set(key)} />`))}
        ${labelled("Schedules: a higher minimum by time of week (JSON list)", html`<textarea name="schedules" rows="2"
          placeholder=${SCHEDULE_HINT} value=${fields.schedules} onInput=${set("schedules")}></textarea>`)}</div></fieldset>
    <p class="form-error" role="alert">${error}</p>
    <div class="row"><button type="submit" class="btn primary">${rule ? "Save rule" : "Create rule"}</button>
      <button type="button" class="btn ghost" onClick=${() => onDone(false)}>Cancel</button></div></form>`;
}

function rulesTable(rules, onEdit, refresh) {
  if (!rules.length) return empty("No scheduling rule: models load on demand wherever they fit.");
  return html`<div class="table-wrap"><table class="table">
    <thead><tr>${["Rule", "Target", "Selector", "Replicas", "Status", ""].map((t) => html`<th>${t}</th>`)}</tr></thead>
    <tbody>${rules.map((r) => html`<tr data-rule=${r.model_name}>
      <td><b>${r.model_name}</b>${r.declared ? html`<span class="tag" title="seeded at boot by LOCALAI_MODEL_SCHEDULING">declared</span>` : null}</td>
      <td>${r.target || html`<span class="muted">none</span>`}${r.shadowed ? html` ${pill("shadowed", `shadowed by ${r.shadowed_by}`)}` : null}</td>
      <td>${r.node_selector ? html`<code>${selectorText(r.node_selector)}</code>` : html`<span class="muted">any node</span>`}</td>
      <td>${r.spread_all ? "all matching" : r.min_replicas || r.max_replicas ? `${r.min_replicas}–${r.max_replicas || "∞"}` : "on demand"}
        ${r.route_policy ? html`<div class="muted small">${r.route_policy}</div>` : null}${scalingSummary(r)}</td>
      <td>${pill(r.status?.state)}<div class="muted small">${r.status?.message || ""}</div>
        ${r.autoscale?.last_pass ? html`<div class="muted small" data-testid="autoscale-last-pass">${`autoscaler: ${r.autoscale.last_pass}`}</div>` : null}</td>
      <td class="end"><div class="row end">
        ${action("Edit", async () => onEdit(r), { kind: "ghost small" })}
        ${dangerAction("Delete", `Delete the scheduling rule for ${r.model_name}?`, async () => {
          await api(`/api/nodes/scheduling/${enc(r.model_name)}`, { method: "DELETE" });
          toast("rule deleted", "ok");
          await refresh();
        })}</div></td></tr>`)}</tbody></table></div>`;
}

function explainView(result) {
  const rows = (result.nodes || []).map((n) => html`<tr data-node=${n.node}>
    <td>${n.node}</td><td>${n.fits ? pill("ok", "fits") : pill("failed", "rejected")}</td>
    <td>${n.fits ? Object.entries(n.scores || {}).map(([k, v]) => `${k} ${Math.round(v)}`).join(" · ")
      : html`<b>${n.filter}</b>${`: ${n.reason}`}${n.detail ? html`<div class="muted small">${typeof n.detail === "string" ? n.detail : JSON.stringify(n.detail)}</div>` : null}`}</td></tr>`);
  const a = result.autoscaling;
  return html`<div class="stack" data-testid="explain-result">
    ${result.chosen ? html`<div class="callout ok">Next load of <b>${result.model}</b> goes to <b>${result.chosen}</b>${result.needs_eviction ? " (after evicting an idle model)" : ""}</div>`
      : html`<div class="callout danger">${result.error || "No node can take this model."}</div>`}
    ${a?.last_pass ? html`<div class="callout" data-testid="explain-autoscaling"><b>Autoscaler: </b>${a.last_pass}
      ${a.last_action ? html`<div class="muted small">${`last action ${a.last_action_at}: ${a.last_action}`}</div>` : null}</div>` : null}
    ${rows.length ? html`<div class="table-wrap"><table class="table">
      <thead><tr>${["Node", "Verdict", "Why"].map((t) => html`<th>${t}</th>`)}</tr></thead><tbody>${rows}</tbody></table></div>` : null}</div>`;
}

async function readScheduling() {
  const [rules, labels, m] = await Promise.all([api("/api/nodes/scheduling"), api("/api/nodes/labels"), api("/api/models")]);
  return { rules, catalog: labels.labels, models: [...m.models.map((x) => x.name), ...Object.keys(m.aliases || {})] };
}

export default function SchedulingPage() {
  const [form, setForm] = useState(null); // {rule} while the form is open
  const [explained, setExplained] = useState(null);
  const [chosen, setChosen] = useState("");
  // A re-read leaves an open form alone: it keeps its own state.
  const { data, reload } = useApi(readScheduling, { kinds: ["node", "replica", "config"], everyMs: 15000,
    initial: { rules: [], catalog: {}, models: [] } });
  const catalog = useRef({});
  catalog.current = data.catalog;
  const explainModel = chosen || data.models[0] || "";
  const done = async (saved) => {
    setForm(null);
    if (saved) await reload();
  };
  return html`
    ${pageHead("Scheduling", "Where models may run and how many replicas they keep",
      action("New rule", async () => setForm({ rule: null }), { kind: "primary", testid: "new-rule" }))}
    <div>${form ? panel(form.rule ? `Edit rule ${form.rule.model_name}` : "New rule", html`<${RuleForm} key=${form.rule?.model_name || "new"}
      catalog=${() => catalog.current} models=${data.models} rule=${form.rule} onDone=${done} />`) : null}</div>
    ${panel("Rules", html`<div>${rulesTable(data.rules, (r) => setForm({ rule: r }), reload)}</div>`, { id: "rules" })}
    <${RoutesPanel} models=${data.models} />
    ${panel("Placement explain", html`<div class="stack">
      <div class="row wrap"><select aria-label="Model to explain" data-testid="explain-model" value=${explainModel}
          onChange=${(e) => setChosen(e.currentTarget.value)}>
        ${data.models.map((m) => option(m))}</select>
        ${action("Explain", async () => setExplained(await api(`/api/nodes/scheduling/explain?model=${enc(explainModel)}`)),
          { kind: "small", testid: "explain" })}</div>
      <div>${explained ? explainView(explained) : null}</div></div>`, { id: "explain" })}`;
}
