// The shell: login, the top bar (navigation, live status, theme), and client-side routing under /app.

import { api, session } from "./api.js";
import { h, replace } from "./dom.js";
import { onLiveStatus, startLive, stopLive } from "./live.js";
import { navigate } from "./nav.js";
import { toast } from "./ui.js";
import nodesPage from "./pages/nodes.js";
import nodePage from "./pages/node.js";
import modelsPage from "./pages/models.js";
import schedulingPage from "./pages/scheduling.js";
import activityPage from "./pages/activity.js";
import chatPage from "./pages/chat.js";
import usagePage from "./pages/usage.js";

const BASE = "/app";
const ROUTES = [
  { path: /^\/?$/, page: nodesPage, nav: "nodes", title: "Nodes" },
  { path: /^\/nodes\/?$/, page: nodesPage, nav: "nodes", title: "Nodes" },
  { path: /^\/nodes\/([0-9a-f-]{36})\/?$/i, page: nodePage, nav: "nodes", title: "Node" },
  { path: /^\/models\/?$/, page: modelsPage, nav: "models", title: "Models" },
  { path: /^\/scheduling\/?$/, page: schedulingPage, nav: "scheduling", title: "Scheduling" },
  { path: /^\/activity\/?$/, page: activityPage, nav: "activity", title: "Activity" },
  { path: /^\/usage\/?$/, page: usagePage, nav: "usage", title: "Usage" },
  { path: /^\/chat\/?$/, page: chatPage, nav: "chat", title: "Chat" },
];
const NAV = [["nodes", "Nodes", "/app"], ["models", "Models", "/app/models"],
  ["scheduling", "Scheduling", "/app/scheduling"], ["activity", "Activity", "/app/activity"], ["usage", "Usage", "/app/usage"],
  ["chat", "Chat", "/app/chat"]];

const root = document.getElementById("root");
let dispose = null;

// Theme: the system's unless the operator picked one (kept in localStorage: it is not a secret).
function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}
function currentTheme() {
  return document.documentElement.dataset.theme
    || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
}
applyTheme(localStorage.getItem("corral.theme"));

function themeToggle() {
  const btn = h("button", { type: "button", class: "btn ghost icon", "aria-label": "Toggle dark mode", dataset: { testid: "theme" } });
  const label = () => { btn.textContent = currentTheme() === "dark" ? "☀" : "☾"; };
  btn.addEventListener("click", () => {
    const next = currentTheme() === "dark" ? "light" : "dark";
    localStorage.setItem("corral.theme", next);
    applyTheme(next);
    label();
  });
  label();
  return btn;
}

function liveBadge() {
  const badge = h("span", { class: "live-badge", dataset: { testid: "live" } });
  onLiveStatus((status) => { badge.dataset.status = status; badge.textContent = status === "live" ? "● live" : `○ ${status}`; });
  return badge;
}

function shell() {
  const nav = h("nav", { class: "nav", "aria-label": "Main" },
    NAV.map(([id, label, href]) => h("a", { href, "data-link": "", dataset: { nav: id } }, label)));
  const main = h("main", { id: "page", class: "page" });
  replace(root,
    h("header", { class: "topbar" },
      h("a", { class: "brand", href: "/app", "data-link": "" }, h("img", { src: "/app/assets/favicon.svg", alt: "" }), "corral"),
      nav,
      h("div", { class: "row tools" }, liveBadge(), themeToggle(),
        h("button", { type: "button", class: "btn ghost", onclick: () => logout() }, "Log out"))),
    main);
  return main;
}

function login(message) {
  stopLive();
  const input = h("input", { type: "password", name: "key", autocomplete: "current-password", required: true,
    placeholder: "Admin API key", "aria-label": "Admin API key" });
  const error = h("p", { class: "form-error", role: "alert" }, message || "");
  const form = h("form", { class: "login panel" },
    h("div", { class: "brand big" }, h("img", { src: "/app/assets/favicon.svg", alt: "" }), "corral"),
    h("p", { class: "muted" }, "Sign in with an admin API key. It stays in this browser tab only."),
    input, error, h("button", { type: "submit", class: "btn primary" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    session.key = input.value.trim();
    try {
      await api("/api/nodes");
      start();
    } catch (err) {
      session.key = "";
      error.textContent = err.status === 401 || err.status === 403 ? "This key is not a valid admin key." : err.message;
    }
  });
  replace(root, h("div", { class: "login-wrap" }, form));
  input.focus();
}

function logout(message) {
  session.key = "";
  session.verified = false;
  if (dispose) dispose();
  dispose = null;
  login(message);
}
session.onLogout = (message) => logout(message);

function route() {
  const path = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : "/";
  const found = ROUTES.find((r) => r.path.test(path));
  const main = document.getElementById("page") || shell();
  if (dispose) dispose();
  dispose = null;
  for (const a of document.querySelectorAll("[data-nav]")) {
    a.classList.toggle("active", Boolean(found && a.dataset.nav === found.nav));
  }
  if (!found) {
    replace(main, h("div", { class: "panel" }, h("h1", {}, "Not found"), h("p", {}, "No page at ", path, ".")));
    return;
  }
  document.title = `${found.title} · corral`;
  main.replaceChildren();
  const params = found.path.exec(path).slice(1);
  try {
    dispose = found.page(main, ...params) || null;
  } catch (err) {
    toast(err.message, "danger");
  }
  main.focus({ preventScroll: true });
}

document.addEventListener("click", (event) => {
  const a = event.target.closest("a[data-link]");
  if (!a || event.metaKey || event.ctrlKey || event.shiftKey || a.target) return;
  event.preventDefault();
  navigate(a.getAttribute("href"));
});
addEventListener("popstate", route);

function start() {
  session.verified = true;
  shell();
  startLive();
  route();
}

if (session.key) start();
else login();
