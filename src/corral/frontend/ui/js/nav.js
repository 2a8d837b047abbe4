// Client-side navigation: push the URL, and the shell (app.js) routes on popstate.

export function navigate(href) {
  history.pushState({}, "", href);
  dispatchEvent(new PopStateEvent("popstate"));
}
