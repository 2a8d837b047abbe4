// Model routes (issue 25): a name clients send as `model`, served by weighted targets (canary, A/B) with
// ordered fallbacks. A panel of the Scheduling page: the routes with each target's share, create / edit /
// delete. The server validates (a 400 names the field); its message is shown under the form.

import { api, enc } from "../api.js";
import { html, useEffect, useRef, useState } from "../lib.js";
import { useApi, useField } from "../hooks.js";
import { action, bar, dangerAction, empty, panel, pill, toast } from "../ui.js";

// "llama3=90, llama3-canary=10" ⇄ [{model, weight}]: one field, as an operator writes a split.
export function parseTargets(text) {
  return text.split(",").map((part) => part.trim()).filter(Boolean).map((part) => {
    const [model, weight] = part.split("=").map((s) => s.trim());
    return weight === undefined || weight === "" ? { model } : { model, weight: Number(weight) };
  });
}

export function targetsText(targets) {
  return (targets || []).map((t) => `${t.model}=${t.weight}`).join(", ");
}

function names(text) {
  return text.split(",").map((s) => s.trim()).filter(Boolean);
}

function RouteForm({ models, route, onDone }) {
  const [name, , onName] = useField(route?.name || "");
  const [targets, , onTargets] = useField(targetsText(route?.targets));
  const [fallbacks, , onFallbacks] = useField((route?.fallbacks || []).join(", "));
  const [description, , onDescription] = useField(route?.description || "");
  const [error, setError] = useState("");
  const first = useRef(null);
  useEffect(() => { first.current?.focus(); }, []);
  const submit = async (event) => {
    event.preventDefault();
    setError("");
    try {
      const body = { targets: parseTargets(targets), fallbacks: names(fallbacks), description };
      await api(`/api/routes/${enc(name.trim())}`, { method: "PUT", body });
      toast(`route ${name.trim()} saved`, "ok");
      onDone(true);
    } catch (err) {
      setError(err.message);
    }
  };
  return html`<form class="stack rule-form" data-testid="route-form" onSubmit=${submit}>
    <datalist id="route-models">${models.map((m) => html`<option value=${m} />`)}</datalist>
    <div class="grid form-grid">
      <label class="field"><span>Route name</span><input ref=${route ? null : first} name="route_name" required maxlength="255"
        value=${name} onInput=${onName} readonly=${Boolean(route)} /></label>
      <label class="field"><span>Targets (model=weight, …)</span><input ref=${route ? first : null} name="targets" required
        list="route-models" placeholder="llama3=90, llama3-canary=10" value=${targets} onInput=${onTargets} /></label>
      <label class="field"><span>Fallbacks, in order</span><input name="fallbacks" list="route-models" placeholder="llama3-small"
        value=${fallbacks} onInput=${onFallbacks} /></label>
      <label class="field"><span>Description</span><input name="description" maxlength="1000" value=${description}
        onInput=${onDescription} /></label></div>
    <p class="form-error" role="alert">${error}</p>
    <div class="row"><button type="submit" class="btn primary">${route ? "Save route" : "Create route"}</button>
      <button type="button" class="btn ghost" onClick=${() => onDone(false)}>Cancel</button></div></form>`;
}

function routesTable(routes, onEdit, refresh) {
  if (!routes.length) return empty("No model route: each request names the model that serves it.");
  return html`<div class="table-wrap"><table class="table">
    <thead><tr>${["Route", "Targets", "Fallbacks", "Status", ""].map((t) => html`<th>${t}</th>`)}</tr></thead>
    <tbody>${routes.map((r) => html`<tr data-route=${r.name}>
      <td><b>${r.name}</b>${r.description ? html`<div class="muted small">${r.description}</div>` : null}</td>
      <td>${r.targets.map((t) => html`<div class="stack tight" data-target=${t.model}>
        <span>${`${t.model} · ${t.share}%`}</span>${bar(t.share, { label: `${t.model} share`, thin: true })}</div>`)}</td>
      <td>${r.fallbacks.length ? r.fallbacks.join(" → ") : html`<span class="muted">none</span>`}</td>
      <td>${r.problems.length ? [pill("waiting", "check"), ...r.problems.map((p) => html`<div class="muted small">${p}</div>`)]
        : pill("active")}</td>
      <td class="end"><div class="row end">
        ${action("Edit", async () => onEdit(r), { kind: "ghost small" })}
        ${dangerAction("Delete", `Delete the route ${r.name}?`, async () => {
          await api(`/api/routes/${enc(r.name)}`, { method: "DELETE" });
          toast("route deleted", "ok");
          await refresh();
        })}</div></td></tr>`)}</tbody></table></div>`;
}

// The panel; `models` are the model and alias names the form completes.
export function RoutesPanel({ models }) {
  const [form, setForm] = useState(null); // {route} while the form is open
  const { data: routes, reload } = useApi(() => api("/api/routes"), { initial: [], kinds: ["config"], everyMs: 15000 });
  const done = async (saved) => {
    setForm(null);
    if (saved) await reload();
  };
  return panel("Model routes", html`<div class="stack">
    ${form ? html`<${RouteForm} key=${form.route?.name || "new"} models=${[...models, ...routes.map((r) => r.name)]}
      route=${form.route} onDone=${done} />` : null}
    ${routesTable(routes, (r) => setForm({ route: r }), reload)}</div>`, {
    id: "routes",
    actions: action("New route", async () => setForm({ route: null }), { kind: "small", testid: "new-route" }),
  });
}
