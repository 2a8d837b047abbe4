// Model routes (issue 25): a name clients send as `model`, served by weighted targets (canary, A/B) with
// ordered fallbacks. A panel of the Scheduling page: the routes with each target's share, create / edit /
// delete. The server validates (a 400 names the field); its message is shown under the form.

import { api, enc } from "../api.js";
import { h, slot } from "../dom.js";
import { action, bar, confirmAction, empty, panel, pill, toast } from "../ui.js";

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

function routeForm(models, route, onDone) {
  const name = h("input", { name: "route_name", required: true, maxlength: 255, value: route?.name || "", readonly: Boolean(route) });
  const targets = h("input", { name: "targets", required: true, list: "route-models", placeholder: "llama3=90, llama3-canary=10",
    value: targetsText(route?.targets) });
  const fallbacks = h("input", { name: "fallbacks", list: "route-models", placeholder: "llama3-small", value: (route?.fallbacks || []).join(", ") });
  const description = h("input", { name: "description", maxlength: 1000, value: route?.description || "" });
  const error = h("p", { class: "form-error", role: "alert" });
  const form = h("form", { class: "stack rule-form", dataset: { testid: "route-form" } },
    h("datalist", { id: "route-models" }, models.map((m) => h("option", { value: m }))),
    h("div", { class: "grid form-grid" },
      h("label", { class: "field" }, h("span", {}, "Route name"), name),
      h("label", { class: "field" }, h("span", {}, "Targets (model=weight, …)"), targets),
      h("label", { class: "field" }, h("span", {}, "Fallbacks, in order"), fallbacks),
      h("label", { class: "field" }, h("span", {}, "Description"), description)),
    error,
    h("div", { class: "row" }, h("button", { type: "submit", class: "btn primary" }, route ? "Save route" : "Create route"),
      h("button", { type: "button", class: "btn ghost", onclick: () => onDone(false) }, "Cancel")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    try {
      const body = { targets: parseTargets(targets.value), fallbacks: names(fallbacks.value), description: description.value };
      await api(`/api/routes/${enc(name.value.trim())}`, { method: "PUT", body });
      toast(`route ${name.value.trim()} saved`, "ok");
      onDone(true);
    } catch (err) {
      error.textContent = err.message;
    }
  });
  return form;
}

function routesTable(routes, onEdit, refresh) {
  if (!routes.length) return empty("No model route: each request names the model that serves it.");
  return h("div", { class: "table-wrap" }, h("table", { class: "table" },
    h("thead", {}, h("tr", {}, ["Route", "Targets", "Fallbacks", "Status", ""].map((t) => h("th", {}, t)))),
    h("tbody", {}, routes.map((r) => h("tr", { dataset: { route: r.name } },
      h("td", {}, h("b", {}, r.name), r.description ? h("div", { class: "muted small" }, r.description) : null),
      h("td", {}, r.targets.map((t) => h("div", { class: "stack tight", dataset: { target: t.model } },
        h("span", {}, `${t.model} · ${t.share}%`), bar(t.share, { label: `${t.model} share`, thin: true })))),
      h("td", {}, r.fallbacks.length ? r.fallbacks.join(" → ") : h("span", { class: "muted" }, "none")),
      h("td", {}, r.problems.length ? [pill("waiting", "check"), ...r.problems.map((p) => h("div", { class: "muted small" }, p))]
        : pill("active")),
      h("td", { class: "end" }, h("div", { class: "row end" },
        action("Edit", async () => onEdit(r), { kind: "ghost small" }),
        action("Delete", async () => {
          if (!await confirmAction(`Delete the route ${r.name}?`, { confirm: "Delete" })) return;
          await api(`/api/routes/${enc(r.name)}`, { method: "DELETE" });
          toast("route deleted", "ok");
          await refresh();
        }, { kind: "ghost small danger" }))))))));
}

// The panel and its refresh; `models()` gives the model and alias names the form completes.
export function routesPanel(models) {
  let routes = [];
  let form = null;
  const formBox = h("div", {});
  const table = slot(() => routesTable(routes, (r) => openForm(r), refresh));
  function openForm(route) {
    form = routeForm([...models(), ...routes.map((r) => r.name)], route, async (saved) => {
      formBox.replaceChildren();
      form = null;
      if (saved) await refresh();
    });
    formBox.replaceChildren(form);
    form.querySelector("input:not([readonly])")?.focus();
  }
  async function refresh() {
    routes = await api("/api/routes");
    await table.refresh(true);
  }
  const el = panel("Model routes", h("div", { class: "stack" }, formBox, table.el), {
    id: "routes",
    actions: action("New route", async () => openForm(null), { kind: "small", testid: "new-route" }),
  });
  return { el, refresh, editing: () => form !== null };
}
