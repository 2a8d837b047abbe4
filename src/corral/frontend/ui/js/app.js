// The shell: login, the top bar (navigation, live status, theme), the operations strip, and client-side
// routing under /app. A page is `export default function XPage({ params })` registered in ROUTES.

import { api, session } from "./api.js";
import { html, render, useEffect, useRef, useState } from "./lib.js";
import { startLive, stopLive, useLiveStatus } from "./live.js";
import { matchRoute, navigate } from "./router.js";
import OpsStrip from "./ops_strip.js";
import NodesPage from "./pages/nodes.js";
import NodePage from "./pages/node.js";
import ModelsPage from "./pages/models.js";
import SchedulingPage from "./pages/scheduling.js";
import ActivityPage from "./pages/activity.js";
import ChatPage from "./pages/chat.js";
import UsagePage from "./pages/usage.js";
import DashboardPage from "./pages/dashboard.js";
import SettingsPage from "./pages/settings.js";
import KeysPage from "./pages/keys.js";
import GalleryPage from "./pages/gallery.js";
import BackendsPage from "./pages/backends.js";

export const ROUTES = [
  { path: /^\/?$/, page: DashboardPage, nav: "dashboard", title: "Dashboard" }, // the landing page
  { path: /^\/dashboard\/?$/, page: DashboardPage, nav: "dashboard", title: "Dashboard" },
  { path: /^\/nodes\/?$/, page: NodesPage, nav: "nodes", title: "Nodes" },
  { path: /^\/nodes\/([0-9a-f-]{36})\/?$/i, page: NodePage, nav: "nodes", title: "Node" },
  { path: /^\/models\/?$/, page: ModelsPage, nav: "models", title: "Models" },
  { path: /^\/gallery\/?$/, page: GalleryPage, nav: "gallery", title: "Model gallery" },
  { path: /^\/backends\/?$/, page: BackendsPage, nav: "backends", title: "Backends" },
  { path: /^\/scheduling\/?$/, page: SchedulingPage, nav: "scheduling", title: "Scheduling" },
  { path: /^\/activity\/?$/, page: ActivityPage, nav: "activity", title: "Activity" },
  { path: /^\/usage\/?$/, page: UsagePage, nav: "usage", title: "Usage" },
  { path: /^\/keys\/?$/, page: KeysPage, nav: "keys", title: "API keys" },
  { path: /^\/chat\/?$/, page: ChatPage, nav: "chat", title: "Chat" },
  { path: /^\/settings\/?$/, page: SettingsPage, nav: "settings", title: "Settings" },
];
export const NAV = [["dashboard", "Dashboard", "/app"], ["nodes", "Nodes", "/app/nodes"],
  ["models", "Models", "/app/models"], ["gallery", "Model gallery", "/app/gallery"], ["backends", "Backends", "/app/backends"],
  ["scheduling", "Scheduling", "/app/scheduling"], ["activity", "Activity", "/app/activity"], ["usage", "Usage", "/app/usage"],
  ["keys", "API keys", "/app/keys"], ["chat", "Chat", "/app/chat"], ["settings", "Settings", "/app/settings"]];

// Theme: the system's unless the operator picked one (kept in localStorage: it is not a secret).
function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}
function currentTheme() {
  return document.documentElement.dataset.theme
    || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
}

function ThemeToggle() {
  const [theme, setTheme] = useState(currentTheme);
  const toggle = () => {
    const next = currentTheme() === "dark" ? "light" : "dark";
    localStorage.setItem("corral.theme", next);
    applyTheme(next);
    setTheme(next);
  };
  return html`<button type="button" class="btn ghost icon" aria-label="Toggle dark mode" data-testid="theme"
    onClick=${toggle}>${theme === "dark" ? "☀" : "☾"}</button>`;
}

// "● live", or what it waits for: "○ reconnecting to /api/events…", "○ waiting for login".
export function LiveBadge() {
  const { state, text } = useLiveStatus();
  return html`<span class="live-badge" data-testid="live" data-status=${state} title=${text}>
    ${state === "live" ? "● live" : `○ ${text}`}</span>`;
}

function usePath() {
  const [path, setPath] = useState(() => location.pathname + location.search);
  useEffect(() => {
    const onPop = () => setPath(location.pathname + location.search);
    addEventListener("popstate", onPop);
    return () => removeEventListener("popstate", onPop);
  }, []);
  return path;
}

function Shell({ onLogout }) {
  const full = usePath();
  const main = useRef(null);
  const found = matchRoute(ROUTES, location.pathname);
  const title = found ? found.route.title : "Not found";
  useEffect(() => {
    document.title = `${title} · corral`;
    main.current?.focus({ preventScroll: true });
    // On a narrow screen the nav scrolls sideways: keep the current page's entry in sight.
    document.querySelector(".nav a.active")?.scrollIntoView({ block: "nearest", inline: "nearest" });
  }, [full, title]);
  const Page = found?.route.page;
  return html`
    <header class="topbar">
      <a class="brand" href="/app" data-link=""><img src="/app/assets/favicon.svg" alt="" />corral</a>
      <nav class="nav" aria-label="Main">
        ${NAV.map(([id, label, href]) => html`<a href=${href} data-link="" data-nav=${id}
          class=${found && found.route.nav === id ? "active" : ""}>${label}</a>`)}
      </nav>
      <div class="row tools"><${LiveBadge} /><${ThemeToggle} />
        <button type="button" class="btn ghost" onClick=${() => onLogout()}>Log out</button></div>
    </header>
    <${OpsStrip} />
    <main id="page" class="page" tabindex="-1" ref=${main}>
      ${Page ? html`<${Page} key=${full} params=${found.params} />`
        : html`<div class="panel"><h1>Not found</h1><p>No page at ${found?.path || location.pathname}.</p></div>`}
    </main>`;
}

function Login({ message, onIn }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(message || "");
  const input = useRef(null);
  useEffect(() => { input.current?.focus(); }, []);
  const submit = async (event) => {
    event.preventDefault();
    session.key = key.trim();
    try {
      await api("/api/nodes");
      onIn();
    } catch (err) {
      session.key = "";
      setError(err.status === 401 || err.status === 403 ? "This key is not a valid admin key." : err.message);
    }
  };
  return html`<div class="login-wrap"><form class="login panel" onSubmit=${submit}>
    <div class="brand big"><img src="/app/assets/favicon.svg" alt="" />corral</div>
    <p class="muted">Sign in with an admin API key. It stays in this browser tab only.</p>
    <input ref=${input} type="password" name="key" autocomplete="current-password" required placeholder="Admin API key"
      aria-label="Admin API key" value=${key} onInput=${(e) => setKey(e.currentTarget.value)} />
    <p class="form-error" role="alert">${error}</p>
    <button type="submit" class="btn primary">Sign in</button>
    <p class="small center"><${LiveBadge} /></p></form></div>`;
}

function App() {
  const [auth, setAuth] = useState(() => ({ signedIn: Boolean(session.key), message: "" }));
  useEffect(() => {
    session.onLogout = (message) => {
      session.key = "";
      session.verified = false;
      setAuth({ signedIn: false, message: message || "" });
    };
  }, []);
  useEffect(() => {
    if (!auth.signedIn) { stopLive(); return undefined; }
    session.verified = true;
    startLive();
    return () => stopLive();
  }, [auth.signedIn]);
  return auth.signedIn ? html`<${Shell} onLogout=${() => session.onLogout("")} />`
    : html`<${Login} message=${auth.message} onIn=${() => setAuth({ signedIn: true, message: "" })} />`;
}

applyTheme(localStorage.getItem("corral.theme"));
document.addEventListener("click", (event) => {
  const a = event.target.closest("a[data-link]");
  if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || a.target) return;
  event.preventDefault();
  navigate(a.getAttribute("href"));
});
const root = document.getElementById("root");
root.replaceChildren();
render(html`<${App} />`, root);
