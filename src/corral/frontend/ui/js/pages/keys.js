// API keys: list, create (the secret is shown once, here, and never again), scope (allowed models, requests and
// tokens per minute, daily and monthly token quotas, priority class, tenant: PATCH /api/keys/<id>) and revoke
// (after a confirmation). A change or a revocation reaches every frontend's key cache at once. Usage per key
// and model over time is on the Usage page.

import { html, useState } from "../lib.js";
import { api, enc, session } from "../api.js";
import { ago } from "../format.js";
import { ActionButton, confirmed, ErrorLine, notify, PageHead, Pill, usePoll } from "./kit.js";

export const PRIORITIES = ["critical", "high", "normal", "low", "batch"]; // tenancy/caller.py's classes
export const LIMITS = [
  ["rpm", "Requests / min"], ["tpm", "Tokens / min"], ["tokens_per_day", "Tokens / day"], ["tokens_per_month", "Tokens / month"],
];
const EMPTY_FORM = { name: "", role: "user", tenant: "", models: "", rpm: "", tpm: "", tokens_per_day: "", tokens_per_month: "", priority: "normal" };

// "a, b/*,  c" -> ["a", "b/*", "c"] (names and globs; none: every model).
export function parseModels(text) {
  return String(text || "").split(/[\s,]+/).map((m) => m.trim()).filter(Boolean);
}

// A limit field: "" is unlimited (0); anything but a whole number >= 0 is an error naming the field.
export function parseLimit(text, field) {
  const s = String(text ?? "").trim().replace(/[_\s]/g, "");
  if (s === "") return 0;
  if (!/^\d+$/.test(s)) throw new Error(`${field} must be a whole number of 0 or more (0 or empty: unlimited)`);
  return Number(s);
}

// The policy a form describes, in the API's fields.
export function policyOf(form) {
  const policy = { tenant: String(form.tenant || "").trim(), models: parseModels(form.models), priority: form.priority || "normal" };
  for (const [key, label] of LIMITS) policy[key] = parseLimit(form[key], `${label} (${key})`);
  return policy;
}

// The body of POST /api/keys: the policy, the name and role; an empty tenant is left to the server (the name).
export function createBody(form) {
  const body = { name: String(form.name || "").trim(), role: form.role === "admin" ? "admin" : "user", ...policyOf(form) };
  if (!body.tenant) delete body.tenant;
  return body;
}

// The fields of a PATCH: only what the form changed from the key's row.
export function policyChanges(row, form) {
  const policy = policyOf(form);
  const out = {};
  for (const [key, value] of Object.entries(policy)) {
    const before = row[key] ?? (key === "models" ? [] : key === "tenant" ? "" : 0);
    if (JSON.stringify(before) !== JSON.stringify(value)) out[key] = value;
  }
  if (out.tenant === "") delete out.tenant; // the tenant cannot be emptied, only changed
  return out;
}

export function formOf(row) {
  const f = { ...EMPTY_FORM, name: row.name || "", role: row.role || "user", tenant: row.tenant || "",
    models: (row.models || []).join(", "), priority: row.priority || "normal" };
  for (const [key] of LIMITS) f[key] = row[key] ? String(row[key]) : "";
  return f;
}

// What a revocation asks: the key, and whether it is the admin key this tab is signed in with.
export function revokeQuestion(row, signedInKey = "") {
  const name = row.name || row.key_prefix;
  const own = row.role === "admin" && row.key_prefix && String(signedInKey).startsWith(row.key_prefix);
  return `Revoke the key ${name}? Every request made with it is refused from now on, on every frontend.`
    + (own ? " It is the admin key this tab is signed in with: you will be logged out." : "");
}

export function limitsText(row) {
  const parts = LIMITS.filter(([key]) => row[key] > 0).map(([key, label]) => `${Number(row[key]).toLocaleString()} ${label.toLowerCase()}`);
  return parts.length ? parts.join(" · ") : "unlimited";
}

function PolicyFields({ form, set, withIdentity }) {
  const input = (key, label, extra = {}) => html`<label class="field"><span>${label}</span>
    <input name=${key} value=${form[key]} onInput=${(e) => set(key, e.currentTarget.value)} ...${extra} /></label>`;
  return html`<div class="grid form-grid">
    ${withIdentity ? input("name", "Name", { required: true, maxlength: 255, placeholder: "team-a ci" }) : null}
    ${withIdentity ? html`<label class="field"><span>Role</span>
      <select name="role" value=${form.role} onChange=${(e) => set("role", e.currentTarget.value)}>
        <option value="user">user</option><option value="admin">admin</option></select></label>` : null}
    ${input("tenant", "Tenant", { maxlength: 255, placeholder: withIdentity ? "the key's name" : "" })}
    ${input("models", "Allowed models", { placeholder: "all; or e.g. llama-*, embedder" })}
    ${LIMITS.map(([key, label]) => input(key, label, { inputmode: "numeric", placeholder: "unlimited" }))}
    <label class="field"><span>Priority</span>
      <select name="priority" value=${form.priority} onChange=${(e) => set("priority", e.currentTarget.value)}>
        ${PRIORITIES.map((p) => html`<option key=${p} value=${p}>${p}</option>`)}</select></label>
  </div>`;
}

function useForm(initial) {
  const [form, setForm] = useState(initial);
  return [form, (key, value) => setForm((f) => ({ ...f, [key]: value })), setForm];
}

function CreateKey({ onCreated }) {
  const [form, set, setForm] = useForm(EMPTY_FORM);
  const [problem, setProblem] = useState("");
  const create = async () => {
    setProblem("");
    let body;
    try { body = createBody(form); } catch (err) { setProblem(err.message); return; }
    if (!body.name) { setProblem("name is required: a name says whose key this is"); return; }
    const created = await api("/api/keys", { method: "POST", body });
    setForm(EMPTY_FORM);
    await onCreated(created);
  };
  return html`<section class="panel" data-testid="key-create"><header class="panel-head"><h2>New key</h2></header>
    <form class="stack" onSubmit=${(e) => e.preventDefault()}>
      <${PolicyFields} form=${form} set=${set} withIdentity=${true} />
      ${problem ? html`<p class="form-error" role="alert">${problem}</p>` : null}
      <div class="row"><${ActionButton} label="Create key" kind="primary" testid="key-create-submit" run=${create} /></div>
    </form></section>`;
}

function ScopeForm({ row, onDone }) {
  const [form, set] = useForm(formOf(row));
  const [problem, setProblem] = useState("");
  const save = async () => {
    setProblem("");
    let changes;
    try { changes = policyChanges(row, form); } catch (err) { setProblem(err.message); return; }
    if (!Object.keys(changes).length) { onDone(false); return; }
    await api(`/api/keys/${enc(row.id)}`, { method: "PATCH", body: changes });
    notify(`Key ${row.name || row.key_prefix} re-scoped: every frontend applies it from its next request.`, "ok");
    onDone(true);
  };
  return html`<form class="stack scope-form" data-testid="key-scope-form" onSubmit=${(e) => e.preventDefault()}>
    <${PolicyFields} form=${form} set=${set} withIdentity=${false} />
    ${problem ? html`<p class="form-error" role="alert">${problem}</p>` : null}
    <div class="row"><${ActionButton} label="Save scope" kind="primary small" testid="key-scope-save" run=${save} />
      <button type="button" class="btn ghost small" onClick=${() => onDone(false)}>Cancel</button></div></form>`;
}

function KeyRow({ row, editing, setEditing, reload }) {
  const revoked = Boolean(row.revoked_at);
  const revoke = async () => {
    if (!(await confirmed(revokeQuestion(row, session.key), "Revoke"))) return;
    await api(`/api/keys/${enc(row.id)}`, { method: "DELETE" });
    notify(`Key ${row.name || row.key_prefix} revoked.`, "ok");
    await reload();
  };
  return html`<li class="key-row" data-testid="key-row" data-key=${row.id} data-name=${row.name} data-revoked=${String(revoked)}>
    <div class="row between wrap">
      <div><b>${row.name || "(unnamed)"}</b> <code class="muted">${row.key_prefix}…</code> <span class="tag">${row.role}</span>
        ${" "}<${Pill} status=${revoked ? "revoked" : "ok"} label=${revoked ? "revoked" : "active"} />
        <div class="muted small" data-testid="key-scope">tenant ${row.tenant || "—"} · models ${(row.models || []).length ? row.models.join(", ") : "all"}
          · ${limitsText(row)} · priority ${row.priority}</div>
        <div class="muted small">created ${ago(row.created_at)}${revoked ? ` · revoked ${ago(row.revoked_at)}` : ""}</div></div>
      ${revoked ? null : html`<div class="row">
        <button type="button" class="btn ghost small" data-testid="key-scope-edit" onClick=${() => setEditing(editing ? null : row.id)}>Scope</button>
        <${ActionButton} label="Revoke" kind="danger small" testid="key-revoke" run=${revoke} /></div>`}
    </div>
    ${editing ? html`<${ScopeForm} row=${row} onDone=${async (changed) => { setEditing(null); if (changed) await reload(); }} />` : null}
  </li>`;
}

export default function KeysPage() {
  const { data, error, reload } = usePoll(() => api("/api/keys"), 0);
  const [secret, setSecret] = useState(null); // {name, key}: shown once
  const [editing, setEditing] = useState(null);
  const [showRevoked, setShowRevoked] = useState(false);
  const rows = (data || []).filter((r) => showRevoked || !r.revoked_at);
  const onCreated = async (created) => {
    setSecret({ name: created.name, key: created.key });
    await reload();
  };
  const copy = async () => {
    try { await navigator.clipboard.writeText(secret.key); notify("Copied.", "ok"); } catch { notify("Select the key and copy it.", "warn"); }
  };
  return html`<div class="stack keys" data-testid="keys">
    <${PageHead} title="API keys" subtitle="Who may call the API, for which models, how much and how urgently.">
      <a class="btn ghost" href="/app/usage" data-link="" data-testid="usage-link">Usage per key and model</a>
    <//>
    <${ErrorLine} error=${error} />
    ${secret ? html`<div class="callout ok stack" data-testid="new-key" role="status">
      <div><b>Key ${secret.name} created.</b> Copy it now: it is shown only this once.</div>
      <code class="secret" data-testid="new-key-secret">${secret.key}</code>
      <div class="row"><button type="button" class="btn small" onClick=${copy}>Copy</button>
        <button type="button" class="btn ghost small" data-testid="new-key-dismiss" onClick=${() => setSecret(null)}>I have stored it</button></div></div>` : null}
    <${CreateKey} onCreated=${onCreated} />
    <section class="panel"><header class="panel-head"><h2>Keys</h2>
      <label class="field check inline"><input type="checkbox" checked=${showRevoked} onChange=${(e) => setShowRevoked(e.currentTarget.checked)} />
        <span>Show revoked</span></label></header>
      ${data === undefined ? html`<p class="empty">Reading keys…</p>` : rows.length
        ? html`<ul class="list">${rows.map((r) => html`<${KeyRow} key=${r.id} row=${r} editing=${editing === r.id}
            setEditing=${setEditing} reload=${reload} />`)}</ul>`
        : html`<p class="empty">No API key yet.</p>`}
    </section></div>`;
}
