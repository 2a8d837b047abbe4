// Units and times as an operator reads them.

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

export function bytes(n) {
  if (!Number.isFinite(n) || n <= 0) return "0 B";
  let i = 0;
  while (n >= 1024 && i < UNITS.length - 1) { n /= 1024; i += 1; }
  return `${n >= 10 || i === 0 ? Math.round(n) : n.toFixed(1)} ${UNITS[i]}`;
}

export function percent(part, whole) {
  return whole > 0 ? Math.max(0, Math.min(100, (100 * part) / whole)) : 0;
}

export function duration(seconds) {
  if (!Number.isFinite(seconds)) return "";
  if (seconds < 60) return `${Math.max(1, Math.round(seconds))}s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)}m`;
  return `${(seconds / 3600).toFixed(1)}h`;
}

export function ago(iso) {
  if (!iso) return "never";
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  if (!Number.isFinite(seconds)) return "";
  return seconds < 5 ? "just now" : `${duration(seconds)} ago`;
}

export function shortRevision(rev) {
  return rev ? String(rev).slice(0, 8) : "—";
}
