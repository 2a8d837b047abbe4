// Settings: the runtime settings every frontend shares (GET/POST /api/settings, stored in PostgreSQL). A save
// sends only what changed, then re-reads: the value shown is the one every frontend now uses, whichever
// frontend or flag wrote it last (the last change wins). Re-read on a timer too, so a change made elsewhere shows.

import { html, useEffect, useState } from "../lib.js";
import { api } from "../api.js";
import { ActionButton, ErrorLine, notify, PageHead, usePoll } from "./kit.js";

const REREAD_MS = 10_000;

// The settings this page knows how to edit, by section. Others the server reports are listed read-only.
export const KNOWN = [
  {
    key: "distributed_disk_headroom_check", section: "Distributed", label: "Disk headroom check", type: "boolean",
    help: "Before placing a model, drop every node whose models filesystem cannot hold it. Off: warn in the "
      + "log and place anyway (staging will most likely fail with no space left on device).",
  },
];

// The settings that differ between what the server holds and the form (what a save sends).
export function changedSettings(server, draft) {
  const out = {};
  for (const [key, value] of Object.entries(draft || {})) {
    if (!server || server[key] !== value) out[key] = value;
  }
  return out;
}

// Sections in display order, each with its known settings; the server's unknown keys go under "Other".
export function sections(server) {
  const groups = new Map();
  for (const s of KNOWN) {
    if (!groups.has(s.section)) groups.set(s.section, []);
    groups.get(s.section).push(s);
  }
  const known = new Set(KNOWN.map((s) => s.key));
  const other = Object.keys(server || {}).filter((k) => !known.has(k)).sort()
    .map((key) => ({ key, section: "Other", label: key, type: "readonly" }));
  if (other.length) groups.set("Other", other);
  return [...groups.entries()];
}

function showValue(value) {
  if (typeof value === "boolean") return value ? "on" : "off";
  return value === undefined ? "—" : JSON.stringify(value);
}

export default function SettingsPage() {
  const { data: server, error, reload } = usePoll(() => api("/api/settings"), REREAD_MS);
  const [draft, setDraft] = useState({});
  const [saved, setSaved] = useState(null); // what the re-read after the last save said
  // Drop draft entries the server now agrees with (saved here, or the same change made elsewhere).
  useEffect(() => {
    if (server) setDraft((d) => changedSettings(server, d));
  }, [server]);
  const changes = changedSettings(server, draft);
  const dirty = Object.keys(changes).length > 0;
  const value = (key) => (key in draft ? draft[key] : server && server[key]);

  const save = async () => {
    await api("/api/settings", { method: "POST", body: changes });
    const reread = await api("/api/settings"); // what every frontend reads now
    setSaved(reread);
    setDraft({});
    await reload();
    notify("Settings saved: every frontend uses them from the next placement.", "ok");
  };

  const field = (s) => {
    if (s.type === "boolean") {
      return html`<label class="field check setting" key=${s.key} data-setting=${s.key}>
        <input type="checkbox" name=${s.key} data-testid=${`setting-${s.key}`} checked=${Boolean(value(s.key))}
          onChange=${(e) => setDraft((d) => ({ ...d, [s.key]: e.currentTarget.checked }))} />
        <span><b>${s.label}</b>${s.key in changes ? html` <span class="pill warn">unsaved</span>` : null}
          <span class="muted small block">${s.help}</span>
          <span class="muted small block">${s.key} · now ${showValue(server && server[s.key])} on every frontend</span></span>
      </label>`;
    }
    return html`<div class="setting" key=${s.key} data-setting=${s.key}><b>${s.label}</b>: <code>${showValue(server[s.key])}</code></div>`;
  };

  return html`<div class="stack settings" data-testid="settings">
    <${PageHead} title="Settings" subtitle="Runtime settings shared by every frontend; they apply from the next placement, without a restart.">
      <${ActionButton} label="Re-read" kind="ghost" testid="settings-reread" run=${reload} />
    <//>
    <${ErrorLine} error=${error} />
    ${server ? html`<form class="stack" onSubmit=${(e) => e.preventDefault()}>
      ${sections(server).map(([name, items]) => html`<section class="panel" key=${name} data-section=${name}>
        <header class="panel-head"><h2>${name}</h2></header>
        <div class="stack">${items.map(field)}</div></section>`)}
      <div class="row">
        <${ActionButton} label="Save" kind="primary" testid="settings-save" run=${save} disabled=${!dirty} />
        ${saved ? html`<span class="small" data-testid="settings-saved" role="status">Saved. Read back: ${
          KNOWN.filter((s) => s.key in saved).map((s) => `${s.label} ${showValue(saved[s.key])}`).join(", ")}.</span>` : null}
      </div>
      <p class="muted small">The frontend's flag (for example --distributed-disk-headroom-check) only sets the value it
        boots with; it and this page write the same setting, so the last change wins.</p>
    </form>` : error ? null : html`<p class="empty">Reading settings…</p>`}
  </div>`;
}
