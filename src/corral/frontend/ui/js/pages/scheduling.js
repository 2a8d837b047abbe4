// Scheduling: rules (target, status, shadowed), create / edit / delete with a completing node-selector
// field, and placement explain ("why this node / why no node") for a model.

import { api, enc } from "../api.js";
import { h, slot } from "../dom.js";
import { follow } from "../live.js";
import { action, confirmAction, empty, panel, pill, toast } from "../ui.js";
import { parseSelector, selectorField, selectorText } from "../complete.js";
import { pageHead } from "./common.js";
import { routesPanel } from "./routes_panel.js";

const POLICIES = [["", "default"], ["round_robin", "round robin"], ["prefix_cache", "prefix cache"]];
// issue 25: autoscaling on load; an empty field is off (cooldown: the frontend's CORRAL_AUTOSCALE_COOLDOWN)
const SCALING = [["target_queue_wait_s", "Target queue wait p95 (s)"], ["target_ttft_s", "Target time to first token p95 (s)"],
  ["scale_down_idle_s", "Scale down after idle (s)"], ["cooldown_s", "Cooldown between actions (s)"]];
const SCHEDULE_HINT = '[{"days": ["mon","tue","wed","thu","fri"], "from": "09:00", "to": "18:00", "tz": "Europe/Paris", "min_replicas": 2}]';

function scalingFields(rule) {
  const inputs = Object.fromEntries(SCALING.map(([key]) => [key, h("input", { name: key, type: "number", min: 0, step: "any",
    placeholder: "off", value: rule?.[key] ?? "" })]));
  const schedules = h("textarea", { name: "schedules", rows: 2, placeholder: SCHEDULE_HINT,
    value: rule?.schedules ? JSON.stringify(rule.schedules) : "" });
  const el = h("fieldset", { class: "stack", dataset: { testid: "autoscale-fields" } }, h("legend", {}, "Autoscaling on load"),
    h("div", { class: "grid form-grid" }, SCALING.map(([key, label]) => h("label", { class: "field" }, h("span", {}, label), inputs[key])),
      h("label", { class: "field" }, h("span", {}, "Schedules: a higher minimum by time of week (JSON list)"), schedules)));
  function values() {
    const out = {};
    for (const [key] of SCALING) if (inputs[key].value.trim() !== "") out[key] = Number(inputs[key].value);
    if (schedules.value.trim()) {
      try { out.schedules = JSON.parse(schedules.value); } catch { throw new Error(`schedules: not valid JSON; e.g. ${SCHEDULE_HINT}`); }
    }
    return out;
  }
  return { el, values };
}

function scalingSummary(r) {
  const parts = [r.target_queue_wait_s != null ? `wait ≤ ${r.target_queue_wait_s}s` : "",
    r.target_ttft_s != null ? `TTFT ≤ ${r.target_ttft_s}s` : "", r.scale_down_idle_s != null ? `idle ${r.scale_down_idle_s}s` : "",
    r.schedules?.length ? `${r.schedules.length} schedule(s)` : ""].filter(Boolean);
  return parts.length ? h("div", { class: "muted small", dataset: { testid: "autoscale-summary" } }, parts.join(" · ")) : null;
}

function ruleForm(catalog, models, rule, onDone) {
  const name = h("input", { name: "model_name", required: true, maxlength: 255, list: "model-names", value: rule?.model_name || "",
    readonly: Boolean(rule) });
  const selector = selectorField(catalog, { value: selectorText(rule?.node_selector) });
  const min = h("input", { name: "min_replicas", type: "number", min: 0, max: 1024, value: rule?.min_replicas ?? 0 });
  const max = h("input", { name: "max_replicas", type: "number", min: 0, max: 1024, value: rule?.max_replicas ?? 0 });
  const spread = h("input", { name: "spread_all", type: "checkbox", checked: rule?.spread_all });
  const policy = h("select", { name: "route_policy" },
    POLICIES.map(([v, l]) => h("option", { value: v, selected: (rule?.route_policy || "") === v }, l)));
  const scaling = scalingFields(rule);
  const error = h("p", { class: "form-error", role: "alert" });
  const form = h("form", { class: "stack rule-form", dataset: { testid: "rule-form" } },
    h("datalist", { id: "model-names" }, models.map((m) => h("option", { value: m }))),
    h("div", { class: "grid form-grid" },
      h("label", { class: "field" }, h("span", {}, "Model or alias"), name),
      h("label", { class: "field" }, h("span", {}, "Node selector"), selector.el),
      h("label", { class: "field" }, h("span", {}, "Min replicas"), min),
      h("label", { class: "field" }, h("span", {}, "Max replicas"), max),
      h("label", { class: "field" }, h("span", {}, "Route policy"), policy),
      h("label", { class: "field check" }, spread, h("span", {}, "One replica on every matching node"))),
    scaling.el,
    error,
    h("div", { class: "row" }, h("button", { type: "submit", class: "btn primary" }, rule ? "Save rule" : "Create rule"),
      h("button", { type: "button", class: "btn ghost", onclick: () => onDone(false) }, "Cancel")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    try {
      const body = { model_name: name.value.trim(), node_selector: parseSelector(selector.input.value),
        min_replicas: Number(min.value), max_replicas: Number(max.value), spread_all: spread.checked, route_policy: policy.value,
        ...scaling.values() };
      if (body.spread_all) { body.min_replicas = 0; body.max_replicas = 0; }
      await api("/api/nodes/scheduling", { method: "POST", body });
      toast(`rule for ${body.model_name} saved`, "ok");
      onDone(true);
    } catch (err) {
      error.textContent = err.message;
    }
  });
  return form;
}

function rulesTable(rules, onEdit, refresh) {
  if (!rules.length) return empty("No scheduling rule: models load on demand wherever they fit.");
  return h("div", { class: "table-wrap" }, h("table", { class: "table" },
    h("thead", {}, h("tr", {}, ["Rule", "Target", "Selector", "Replicas", "Status", ""].map((t) => h("th", {}, t)))),
    h("tbody", {}, rules.map((r) => h("tr", { dataset: { rule: r.model_name } },
      h("td", {}, h("b", {}, r.model_name), r.declared ? h("span", { class: "tag", title: "seeded at boot by LOCALAI_MODEL_SCHEDULING" }, "declared") : null),
      h("td", {}, r.target || h("span", { class: "muted" }, "none"), r.shadowed ? [" ", pill("shadowed", `shadowed by ${r.shadowed_by}`)] : null),
      h("td", {}, r.node_selector ? h("code", {}, selectorText(r.node_selector)) : h("span", { class: "muted" }, "any node")),
      h("td", {}, r.spread_all ? "all matching" : r.min_replicas || r.max_replicas ? `${r.min_replicas}–${r.max_replicas || "∞"}` : "on demand", r.route_policy ? h("div", { class: "muted small" }, r.route_policy) : null, scalingSummary(r)),
      h("td", {}, pill(r.status?.state), h("div", { class: "muted small" }, r.status?.message || ""),
        r.autoscale?.last_pass ? h("div", { class: "muted small", dataset: { testid: "autoscale-last-pass" } }, `autoscaler: ${r.autoscale.last_pass}`) : null),
      h("td", { class: "end" }, h("div", { class: "row end" },
        action("Edit", async () => onEdit(r), { kind: "ghost small" }),
        action("Delete", async () => {
          if (!await confirmAction(`Delete the scheduling rule for ${r.model_name}?`, { confirm: "Delete" })) return;
          await api(`/api/nodes/scheduling/${enc(r.model_name)}`, { method: "DELETE" });
          toast("rule deleted", "ok");
          await refresh();
        }, { kind: "ghost small danger" }))))))));
}

function explainView(result) {
  const rows = (result.nodes || []).map((n) => h("tr", { dataset: { node: n.node } },
    h("td", {}, n.node), h("td", {}, n.fits ? pill("ok", "fits") : pill("failed", "rejected")),
    h("td", {}, n.fits ? Object.entries(n.scores || {}).map(([k, v]) => `${k} ${Math.round(v)}`).join(" · ")
      : [h("b", {}, n.filter), `: ${n.reason}`, n.detail ? h("div", { class: "muted small" }, typeof n.detail === "string" ? n.detail : JSON.stringify(n.detail)) : null])));
  return h("div", { class: "stack", dataset: { testid: "explain-result" } },
    result.chosen ? h("div", { class: "callout ok" }, "Next load of ", h("b", {}, result.model), " goes to ", h("b", {}, result.chosen),
      result.needs_eviction ? " (after evicting an idle model)" : "")
      : h("div", { class: "callout danger" }, result.error || "No node can take this model."),
    result.autoscaling?.last_pass ? h("div", { class: "callout", dataset: { testid: "explain-autoscaling" } },
      h("b", {}, "Autoscaler: "), result.autoscaling.last_pass,
      result.autoscaling.last_action ? h("div", { class: "muted small" }, `last action ${result.autoscaling.last_action_at}: ${result.autoscaling.last_action}`) : null) : null,
    rows.length ? h("div", { class: "table-wrap" }, h("table", { class: "table" },
      h("thead", {}, h("tr", {}, ["Node", "Verdict", "Why"].map((t) => h("th", {}, t)))), h("tbody", {}, rows))) : null);
}

export default function schedulingPage(root) {
  let rules = [];
  let catalog = {};
  let models = [];
  let form = null;
  const formBox = h("div", {});
  const table = slot(() => rulesTable(rules, (r) => openForm(r), refresh));
  const modelSelect = h("select", { "aria-label": "Model to explain", dataset: { testid: "explain-model" } });
  const explainOut = h("div", {});
  const routes = routesPanel(() => models);  // issue 25: model routes

  function openForm(rule) {
    form = ruleForm(() => catalog, models, rule, async (saved) => {
      formBox.replaceChildren();
      form = null;
      if (saved) await refresh();
    });
    formBox.replaceChildren(panel(rule ? `Edit rule ${rule.model_name}` : "New rule", form));
    form.querySelector("input:not([readonly])")?.focus();
  }
  async function refresh() {
    let labels;
    [rules, labels, { models }] = await Promise.all([api("/api/nodes/scheduling"), api("/api/nodes/labels"),
      api("/api/models").then((m) => ({ models: [...m.models.map((x) => x.name), ...Object.keys(m.aliases || {})] }))]);
    catalog = labels.labels;
    if (!modelSelect.options.length) modelSelect.replaceChildren(...models.map((m) => h("option", { value: m }, m)));
    await Promise.all([table.refresh(), routes.editing() ? null : routes.refresh()]);
  }
  root.append(pageHead("Scheduling", "Where models may run and how many replicas they keep",
    action("New rule", async () => openForm(null), { kind: "primary", testid: "new-rule" })),
  formBox, panel("Rules", table.el, { id: "rules" }), routes.el,
  panel("Placement explain", h("div", { class: "stack" },
    h("div", { class: "row wrap" }, modelSelect, action("Explain", async () => {
      explainOut.replaceChildren(explainView(await api(`/api/nodes/scheduling/explain?model=${enc(modelSelect.value)}`)));
    }, { kind: "small", testid: "explain" })), explainOut), { id: "explain" }));
  refresh().catch((err) => toast(err.message, "danger"));
  return follow(["node", "replica", "config"], () => { if (!form) refresh().catch(() => {}); }, { everyMs: 15000 });
}
