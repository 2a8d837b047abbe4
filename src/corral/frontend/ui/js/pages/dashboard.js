// Dashboard: the cluster's traffic over the last hour from GET /api/traffic (the frontend's in-memory ring, the
// same on every frontend) — requests and errors, time to first token, latency, tokens/s, in-flight and queued,
// loads and evictions — then the same for one model, and VRAM/RAM/disk per node. Charts are uPlot (vendored);
// each chart carries its last point in data-last, so a browser test sees it move with traffic.

import { html, useEffect, useMemo, useRef, useState } from "../lib.js";
import uPlot from "../../vendor/uplot/uPlot.esm.js";
import { optional } from "../api.js";
import { bytes } from "../format.js";
import { ensureCss, ErrorLine, PageHead, usePoll } from "./kit.js";

ensureCss("/app/assets/vendor/uplot/uPlot.min.css");

const DEFAULT_INTERVAL_S = 5;
const CHART_HEIGHT = 170;
const SPARSE_POINTS = 60; // fewer samples than this in a series: each is drawn as a point too
const WINDOWS = [[900, "15 min"], [3600, "1 hour"]];
const COLORS = ["#3b82f6", "#ef4444", "#10b981", "#f59e0b", "#8b5cf6"];

// What each chart of a traffic series draws: [series key, legend label] per line, and the unit of its axis.
export const TRAFFIC_CHARTS = [
  { id: "requests", title: "Requests / s", unit: "rate", lines: [["requests_per_s", "requests/s"], ["errors_per_s", "errors/s"]] },
  { id: "ttft", title: "Time to first token", unit: "ms", lines: [["ttft_p50_ms", "p50"], ["ttft_p95_ms", "p95"]] },
  { id: "latency", title: "Latency", unit: "ms", lines: [["latency_p50_ms", "p50"], ["latency_p95_ms", "p95"]] },
  { id: "tokens", title: "Tokens / s", unit: "rate", lines: [["tokens_in_per_s", "in"], ["tokens_out_per_s", "out"]] },
  { id: "queue", title: "In flight and queued", unit: "count", lines: [["in_flight", "in flight"], ["queued", "queued"]] },
  { id: "loads", title: "Loads and evictions", unit: "count", lines: [["loads", "loads"], ["evictions", "evictions"]] },
];
// A model's own charts: the ones that make sense for one model (loads/evictions and queue are per model too).
export const MODEL_CHARTS = TRAFFIC_CHARTS;
export const NODE_CHARTS = [
  { id: "vram", title: "VRAM", unit: "bytes", lines: [["vram_used_bytes", "used"], ["vram_total_bytes", "total"]] },
  { id: "ram", title: "RAM", unit: "bytes", lines: [["ram_used_bytes", "used"], ["ram_total_bytes", "total"]] },
  { id: "disk", title: "Models disk free", unit: "bytes", lines: [["disk_free_bytes", "free"]] },
];

// The last sampled value of a series (null where there is none).
export function lastValue(values) {
  if (!Array.isArray(values)) return null;
  for (let i = values.length - 1; i >= 0; i -= 1) {
    const v = values[i];
    if (v !== null && v !== undefined && Number.isFinite(Number(v))) return Number(v);
  }
  return null;
}

// data-last: a plain number (two decimals at most), "" when the chart has no point yet.
export function formatLast(value) {
  return value === null || value === undefined ? "" : String(Math.round(value * 100) / 100);
}

// An axis or legend value in the chart's unit.
export function formatValue(value, unit) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "—";
  if (unit === "bytes") return bytes(value);
  if (unit === "ms") {
    if (value >= 1000) return `${(value / 1000).toFixed(1)} s`;
    return value > 0 && value < 10 ? `${value.toFixed(1)} ms` : `${Math.round(value)} ms`;
  }
  if (Math.abs(value) >= 1000) return `${(value / 1000).toFixed(1)}k`;
  return unit === "count" ? String(Math.round(value * 10) / 10) : String(Math.round(value * 100) / 100);
}

// The top of a chart's y axis: a little above its highest point; an empty chart keeps a readable scale.
export function yTop(max, unit) {
  if (Number.isFinite(max) && max > 0) return max * 1.1;
  return unit === "bytes" ? 2 ** 30 : unit === "ms" ? 10 : 1;
}

// Few samples in the window (a frontend just started, a node just joined): draw them as points, a line of
// one or two samples being invisible.
export function sparse(values) {
  return (values || []).filter((v) => v !== null && v !== undefined).length < SPARSE_POINTS;
}

// Has this series seen any traffic in the window (a request, a token, something in flight or queued)?
export function hasTraffic(series) {
  if (!series || !Array.isArray(series.t) || !series.t.length) return false;
  return ["requests_per_s", "errors_per_s", "tokens_out_per_s", "in_flight", "queued", "loads"].some(
    (key) => (series[key] || []).some((v) => v !== null && v > 0));
}

// uPlot's data: the time axis, then one array per line (nulls where there is none, drawn as gaps).
export function chartData(series, lines) {
  const t = (series && series.t) || [];
  return [t, ...lines.map(([key]) => {
    const values = series && Array.isArray(series[key]) ? series[key] : [];
    return t.map((_, i) => (values[i] === undefined ? null : values[i]));
  })];
}

// The models to offer in the selector: busiest first (by the requests of the window), then by name.
export function modelOrder(models) {
  const total = (s) => (s.requests_per_s || []).reduce((sum, v) => sum + (v || 0), 0);
  return Object.entries(models || {}).sort(([a, sa], [b, sb]) => total(sb) - total(sa) || a.localeCompare(b)).map(([m]) => m);
}

export function slug(text) {
  return String(text).toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "");
}

function currentTheme() {
  return document.documentElement.dataset.theme || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
}

// The theme, re-read when the toggle or the system changes it (axes and grid are drawn in its colours).
function useTheme() {
  const [theme, setTheme] = useState(currentTheme);
  useEffect(() => {
    const update = () => setTheme(currentTheme());
    const observer = new MutationObserver(update);
    observer.observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
    const query = matchMedia("(prefers-color-scheme: dark)");
    query.addEventListener("change", update);
    return () => { observer.disconnect(); query.removeEventListener("change", update); };
  }, []);
  return theme;
}

function Chart({ testid, spec, series, theme }) {
  const box = useRef(null);
  const plot = useRef(null);
  const data = chartData(series, spec.lines);
  const last = lastValue(data[1]);
  const current = useRef(data);
  current.current = data;
  useEffect(() => {
    const el = box.current;
    const ink = getComputedStyle(el).color;
    const grid = theme === "dark" ? "rgba(255,255,255,0.08)" : "rgba(0,0,0,0.07)";
    const fmt = (v) => formatValue(v, spec.unit);
    const opts = {
      width: Math.max(200, el.clientWidth), height: CHART_HEIGHT,
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, yTop(max, spec.unit)] } },
      series: [{}, ...spec.lines.map(([, label], i) => ({
        label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false,
        points: { show: (u, si) => sparse(u.data[si]), size: 5, fill: COLORS[i % COLORS.length] },
        value: (_u, v) => fmt(v),
      }))],
      axes: [
        { stroke: ink, grid: { stroke: grid }, ticks: { stroke: grid } },
        { stroke: ink, grid: { stroke: grid }, ticks: { stroke: grid }, size: 64, values: (_u, vals) => vals.map(fmt) },
      ],
      legend: { live: true },
    };
    plot.current = new uPlot(opts, current.current, el);
    const resize = new ResizeObserver(() => {
      if (plot.current) plot.current.setSize({ width: Math.max(200, el.clientWidth), height: CHART_HEIGHT });
    });
    resize.observe(el);
    return () => { resize.disconnect(); plot.current.destroy(); plot.current = null; };
  }, [theme, spec]);
  useEffect(() => { if (plot.current) plot.current.setData(data); });
  return html`<section class="panel chart" data-testid=${testid} data-last=${formatLast(last)} data-points=${data[0].length}>
    <header class="panel-head"><h2>${spec.title}</h2><span class="muted small">${formatValue(last, spec.unit)}</span></header>
    <div class="chart-box" ref=${box}></div></section>`;
}

function Charts({ prefix, specs, series, theme }) {
  return html`<div class="chart-grid">${specs.map((spec) =>
    html`<${Chart} key=${spec.id} testid=${`${prefix}${spec.id}`} spec=${spec} series=${series} theme=${theme} />`)}</div>`;
}

export default function DashboardPage() {
  const theme = useTheme();
  const [windowS, setWindowS] = useState(3600);
  const [intervalS, setIntervalS] = useState(DEFAULT_INTERVAL_S);
  const [model, setModel] = useState("");
  const { data, error } = usePoll(() => optional(`/api/traffic?window=${windowS}`), intervalS * 1000, windowS);
  useEffect(() => {
    if (data && data.interval_s > 0 && data.interval_s !== intervalS) setIntervalS(data.interval_s);
  }, [data, intervalS]);
  const models = useMemo(() => modelOrder(data && data.models), [data]);
  const shown = models.includes(model) ? model : models[0] || "";
  const nodes = Object.entries((data && data.nodes) || {}).sort(([, a], [, b]) => String(a.name).localeCompare(String(b.name)));

  let body;
  if (data === undefined) body = error ? null : html`<p class="empty">Reading traffic…</p>`;
  else if (data === null) {
    body = html`<div class="callout warn" data-testid="traffic-absent">This frontend has no traffic API (GET /api/traffic) yet.</div>`;
  } else {
    body = html`
      ${hasTraffic(data.cluster) ? html`<${Charts} prefix="chart-" specs=${TRAFFIC_CHARTS} series=${data.cluster} theme=${theme} />`
        : html`<p class="empty" data-testid="traffic-empty">No traffic yet in this window: the charts appear with the first request.</p>`}
      <section class="stack dash-section">
        <div class="row between wrap"><h2>Per model</h2>
          ${models.length ? html`<label class="field inline"><span>Model</span>
            <select data-testid="model-select" aria-label="Model to chart" value=${shown}
              onChange=${(e) => setModel(e.currentTarget.value)}>
              ${models.map((m) => html`<option key=${m} value=${m}>${m}</option>`)}</select></label>` : null}</div>
        ${shown ? html`<${Charts} key=${shown} prefix="chart-model-" specs=${MODEL_CHARTS} series=${data.models[shown]} theme=${theme} />`
          : html`<p class="empty">No model has served a request in this window.</p>`}
      </section>
      <section class="stack dash-section">
        <h2>Per node</h2>
        ${nodes.length ? nodes.map(([id, n]) => html`<div key=${id} class="stack" data-testid="node-charts" data-node=${n.name}>
            <h3>${n.name}</h3>
            <${Charts} prefix=${`chart-node-${slug(n.name)}-`} specs=${NODE_CHARTS} series=${n} theme=${theme} /></div>`)
          : html`<p class="empty">No node has reported yet.</p>`}
      </section>`;
  }
  return html`<div class="stack dashboard" data-testid="dashboard">
    <${PageHead} title="Dashboard" subtitle=${`Traffic of the whole cluster, per model and per node; every ${intervalS} s.`}>
      <select aria-label="Window" data-testid="window" value=${windowS} onChange=${(e) => setWindowS(Number(e.currentTarget.value))}>
        ${WINDOWS.map(([s, label]) => html`<option key=${s} value=${s}>${label}</option>`)}</select>
    <//>
    <${ErrorLine} error=${error} />
    ${body}</div>`;
}
