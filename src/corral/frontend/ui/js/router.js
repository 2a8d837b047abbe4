// Client-side routing under /app: a table of {path: RegExp, …} matched against the path after the base; the
// regex's groups are the page's params. Pure, so node tests check it; navigate() pushes the URL and the shell
// re-renders on popstate.

export const BASE = "/app";

// The route for `pathname` (the browser's, base included) and its params, or null.
export function matchRoute(routes, pathname) {
  const path = pathname === BASE || pathname.startsWith(`${BASE}/`) ? pathname.slice(BASE.length) || "/" : pathname;
  for (const route of routes) {
    const found = route.path.exec(path);
    if (found) return { route, params: found.slice(1).map(decodeURIComponent), path };
  }
  return null;
}

export function navigate(href) {
  history.pushState({}, "", href);
  dispatchEvent(new PopStateEvent("popstate"));
}
