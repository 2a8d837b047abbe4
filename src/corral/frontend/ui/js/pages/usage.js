// Usage: tokens and requests per API key, tenant, model, hour or day, as the engines counted them
// (GET /api/usage). Each frontend writes its counts every CORRAL_USAGE_FLUSH_INTERVAL, so the newest
// requests show up after that; the page re-reads every 15 s.

import { api } from "../api.js";
import { html, useEffect, useState } from "../lib.js";
import { useApi } from "../hooks.js";
import { bar, empty, kv, panel, toast } from "../ui.js";
import { pageHead } from "./common.js";

const WINDOWS = [["24h", "Last 24 hours", 86400], ["7d", "Last 7 days", 7 * 86400], ["30d", "Last 30 days", 30 * 86400],
  ["month", "This month (UTC)", 0]];
const GROUPINGS = [["key,model", "Key and model"], ["key", "Key"], ["model", "Model"], ["tenant", "Tenant"],
  ["tenant,model", "Tenant and model"], ["hour", "Hour"], ["day", "Day"], ["day,key", "Day and key"]];
const COUNTS = [["requests", "Requests"], ["prompt_tokens", "Prompt"], ["completion_tokens", "Completion"],
  ["cached_tokens", "Cached"], ["total_tokens", "Total tokens"]];
const ROWS_MAX = 1000;

const number = (n) => Number(n || 0).toLocaleString();

function since(windowId) {
  const now = new Date();
  if (windowId === "month") return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)).toISOString();
  const seconds = WINDOWS.find(([id]) => id === windowId)[2];
  return new Date(now.getTime() - seconds * 1000).toISOString();
}

export function usageQuery({ window: windowId, group_by: groupBy, key, model, tenant }) {
  const params = new URLSearchParams({ since: since(windowId), group_by: groupBy, limit: String(ROWS_MAX) });
  if (key !== "*") params.set("key", key);
  if (model) params.set("model", model);
  if (tenant.trim()) params.set("tenant", tenant.trim());
  return params;
}

// The columns the grouping returned, in a fixed order; the key shows its name when it has one.
function columns(groupBy) {
  const cols = [];
  if (groupBy.includes("hour")) cols.push(["Hour (UTC)", (r) => r.hour.slice(0, 16).replace("T", " ")]);
  if (groupBy.includes("day")) cols.push(["Day (UTC)", (r) => r.day.slice(0, 10)]);
  if (groupBy.includes("key")) {
    cols.push(["Key", (r) => (r.key_id === "" ? html`<span class="muted">no key</span>`
      : html`<span title=${r.key_id}>${r.key_name || r.key_id.slice(0, 8)}</span>`)]);
  }
  if (groupBy.includes("tenant")) cols.push(["Tenant", (r) => r.tenant]);
  if (groupBy.includes("model")) cols.push(["Model", (r) => r.model]);
  return cols;
}

function usageTable(body) {
  const rows = body.usage;
  if (!rows.length) return empty("No usage in this window yet.");
  const cols = columns(body.group_by);
  const most = Math.max(...rows.map((r) => r.total_tokens), 1);
  return html`<div class="table-wrap"><table class="table" data-testid="usage-table">
    <thead><tr>${cols.map(([t]) => html`<th>${t}</th>`)}${COUNTS.map(([, t]) => html`<th class="end">${t}</th>`)}<th>Share</th></tr></thead>
    <tbody>${rows.map((r) => html`<tr data-key=${r.key_id ?? ""} data-model=${r.model ?? ""} data-tenant=${r.tenant ?? ""}>
      ${cols.map(([, cell]) => html`<td>${cell(r)}</td>`)}
      ${COUNTS.map(([name]) => html`<td class="end" data-count=${name}>${number(r[name])}</td>`)}
      <td>${bar((100 * r.total_tokens) / most, { thin: true, label: "share of the largest row" })}</td></tr>`)}</tbody></table></div>`;
}

function totals(body) {
  const sum = (name) => body.usage.reduce((acc, r) => acc + r[name], 0);
  return kv([...COUNTS.map(([name, label]) => [label, number(sum(name))]),
    body.truncated ? ["Note", `only the first ${ROWS_MAX} rows are shown: narrow the filters`] : null]);
}

function choice(name, label, options, value, onChange) {
  return html`<select name=${name} aria-label=${label} value=${value} onChange=${(e) => onChange(e.currentTarget.value)}>
    ${options.map(([v, l]) => html`<option value=${v}>${l}</option>`)}</select>`;
}

export default function UsagePage() {
  const [filters, setFilters] = useState({ window: "24h", group_by: "key,model", key: "*", model: "", tenant: "" });
  const [tenant, setTenant] = useState("");
  const [options, setOptions] = useState({ keys: [], models: [] });
  const set = (name) => (value) => setFilters((f) => ({ ...f, [name]: value }));
  const { data: body, error, reload } = useApi(() => api(`/api/usage?${usageQuery(filters)}`), { everyMs: 15000, quiet: true });
  useEffect(() => { reload().catch(() => {}); }, [filters, reload]);
  useEffect(() => {
    Promise.all([api("/api/keys"), api("/api/models")])
      .then(([keys, models]) => setOptions({ keys, models: models.models }))
      .catch((err) => toast(err.message, "danger"));
  }, []);
  const keyOptions = [["*", "All keys"], ["", "No key (anonymous)"],
    ...options.keys.map((k) => [k.id, `${k.name || k.key_prefix || k.id.slice(0, 8)}${k.revoked_at ? " (revoked)" : ""}`])];
  const flushS = body?.flush_interval_s;
  return html`
    ${pageHead("Usage", "Tokens and requests per API key and model, as the engines counted them")}
    ${panel("Filters", html`<form class="row wrap" onSubmit=${(e) => { e.preventDefault(); set("tenant")(tenant); }}>
      ${choice("window", "Time window", WINDOWS.map(([id, label]) => [id, label]), filters.window, set("window"))}
      ${choice("group_by", "Group by", GROUPINGS, filters.group_by, set("group_by"))}
      ${choice("key", "API key", keyOptions, filters.key, set("key"))}
      ${choice("model", "Model", [["", "All models"], ...options.models.map((m) => [m.name, m.name])], filters.model, set("model"))}
      <input name="tenant" maxlength="255" placeholder="any tenant" aria-label="Tenant" value=${tenant}
        onInput=${(e) => setTenant(e.currentTarget.value)} onChange=${(e) => set("tenant")(e.currentTarget.value)} /></form>`)}
    ${panel("Totals", html`<div>${body ? totals(body) : null}</div>`, { id: "usage-totals" })}
    ${panel("Usage", html`<div class="stack"><div data-testid="usage">
        ${error ? html`<div class="callout danger" role="alert">${error.message}</div>` : body ? usageTable(body) : null}</div>
      <p class="muted small">${flushS ? `Each frontend writes its counts every ${flushS} s: the newest requests appear after that.` : ""}</p></div>`,
      { id: "usage-rows" })}`;
}
