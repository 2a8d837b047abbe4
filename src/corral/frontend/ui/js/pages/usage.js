// Usage: tokens and requests per API key, tenant, model, hour or day, as the engines counted them
// (GET /api/usage). Each frontend writes its counts every CORRAL_USAGE_FLUSH_INTERVAL, so the newest
// requests show up after that; the page re-reads every 15 s.

import { api } from "../api.js";
import { h, slot } from "../dom.js";
import { follow } from "../live.js";
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

function select(name, label, options, value) {
  return h("select", { name, "aria-label": label },
    options.map(([v, l]) => h("option", { value: v, selected: v === value }, l)));
}

// The columns the grouping returned, in a fixed order; the key shows its name when it has one.
function columns(groupBy) {
  const cols = [];
  if (groupBy.includes("hour")) cols.push(["Hour (UTC)", (r) => r.hour.slice(0, 16).replace("T", " ")]);
  if (groupBy.includes("day")) cols.push(["Day (UTC)", (r) => r.day.slice(0, 10)]);
  if (groupBy.includes("key")) {
    cols.push(["Key", (r) => (r.key_id === "" ? h("span", { class: "muted" }, "no key")
      : h("span", { title: r.key_id }, r.key_name || r.key_id.slice(0, 8)))]);
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
  return h("div", { class: "table-wrap" }, h("table", { class: "table", dataset: { testid: "usage-table" } },
    h("thead", {}, h("tr", {}, cols.map(([t]) => h("th", {}, t)), COUNTS.map(([, t]) => h("th", { class: "end" }, t)),
      h("th", {}, "Share"))),
    h("tbody", {}, rows.map((r) => h("tr", { dataset: { key: r.key_id ?? "", model: r.model ?? "", tenant: r.tenant ?? "" } },
      cols.map(([, cell]) => h("td", {}, cell(r))),
      COUNTS.map(([name]) => h("td", { class: "end", dataset: { count: name } }, number(r[name]))),
      h("td", {}, bar((100 * r.total_tokens) / most, { thin: true, label: "share of the largest row" })))))));
}

function totals(body) {
  const sum = (name) => body.usage.reduce((acc, r) => acc + r[name], 0);
  return kv([...COUNTS.map(([name, label]) => [label, number(sum(name))]),
    body.truncated ? ["Note", `only the first ${ROWS_MAX} rows are shown: narrow the filters`] : null]);
}

export default function usagePage(root) {
  const windowSel = select("window", "Time window", WINDOWS.map(([id, label]) => [id, label]), "24h");
  const groupSel = select("group_by", "Group by", GROUPINGS, "key,model");
  const keySel = h("select", { name: "key", "aria-label": "API key" }, h("option", { value: "*" }, "All keys"));
  const modelSel = h("select", { name: "model", "aria-label": "Model" }, h("option", { value: "" }, "All models"));
  const tenant = h("input", { name: "tenant", maxlength: 255, placeholder: "any tenant", "aria-label": "Tenant" });
  const summary = h("div", {});
  const note = h("p", { class: "muted small" });
  const table = slot(async () => {
    const params = new URLSearchParams({ since: since(windowSel.value), group_by: groupSel.value, limit: String(ROWS_MAX) });
    if (keySel.value !== "*") params.set("key", keySel.value);
    if (modelSel.value) params.set("model", modelSel.value);
    if (tenant.value.trim()) params.set("tenant", tenant.value.trim());
    const body = await api(`/api/usage?${params}`);
    const flushS = body.flush_interval_s;
    summary.replaceChildren(totals(body));
    note.textContent = flushS ? `Each frontend writes its counts every ${flushS} s: the newest requests appear after that.` : "";
    return usageTable(body);
  }, { dataset: { testid: "usage" } });

  async function options() {
    const [keys, models] = await Promise.all([api("/api/keys"), api("/api/models")]);
    keySel.append(h("option", { value: "" }, "No key (anonymous)"),
      ...keys.map((k) => h("option", { value: k.id }, `${k.name || k.key_prefix || k.id.slice(0, 8)}${k.revoked_at ? " (revoked)" : ""}`)));
    modelSel.append(...models.models.map((m) => h("option", { value: m.name }, m.name)));
  }
  for (const field of [windowSel, groupSel, keySel, modelSel]) field.addEventListener("change", () => table.refresh(true));
  tenant.addEventListener("change", () => table.refresh(true));

  root.append(pageHead("Usage", "Tokens and requests per API key and model, as the engines counted them"),
    panel("Filters", h("form", { class: "row wrap", onsubmit: (e) => { e.preventDefault(); table.refresh(true); } },
      windowSel, groupSel, keySel, modelSel, tenant)),
    panel("Totals", summary, { id: "usage-totals" }),
    panel("Usage", h("div", { class: "stack" }, table.el, note), { id: "usage-rows" }));
  options().catch((err) => toast(err.message, "danger"));
  table.refresh();
  return follow([], () => table.refresh(), { everyMs: 15000 });
}
