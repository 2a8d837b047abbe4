import assert from "node:assert/strict";
import { test } from "node:test";
import { matchRoute } from "../../src/corral/frontend/ui/js/router.js";

const ROUTES = [
  { path: /^\/?$/, name: "landing" },
  { path: /^\/nodes\/?$/, name: "nodes" },
  { path: /^\/nodes\/([0-9a-f-]{36})\/?$/i, name: "node" },
  { path: /^\/chat\/?$/, name: "chat" },
];
const ID = "0f8fad5b-d9cb-469f-a165-70867728950e";

test("the base alone and with a slash is the landing page", () => {
  assert.equal(matchRoute(ROUTES, "/app").route.name, "landing");
  assert.equal(matchRoute(ROUTES, "/app/").route.name, "landing");
});

test("a page's path matches with or without a trailing slash", () => {
  assert.equal(matchRoute(ROUTES, "/app/nodes").route.name, "nodes");
  assert.equal(matchRoute(ROUTES, "/app/nodes/").route.name, "nodes");
  assert.equal(matchRoute(ROUTES, "/app/chat").path, "/chat");
});

test("the regex's groups are the page's params", () => {
  const found = matchRoute(ROUTES, `/app/nodes/${ID.toUpperCase()}`);
  assert.equal(found.route.name, "node");
  assert.deepEqual(found.params, [ID.toUpperCase()]);
});

test("an unknown path or a malformed id matches nothing", () => {
  assert.equal(matchRoute(ROUTES, "/app/nope"), null);
  assert.equal(matchRoute(ROUTES, "/app/nodes/not-an-id"), null);
  assert.equal(matchRoute(ROUTES, "/application"), null); // a prefix of the base is not the base
});
