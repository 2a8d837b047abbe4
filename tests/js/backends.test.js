// Pure helpers of the Backends page: which nodes run backends, the install request, a job's line.
import assert from "node:assert/strict";
import test from "node:test";

import { backendNodes, installable, installRequest, jobLine, knownBackends } from "../../src/corral/frontend/ui/js/pages/backends.js";

test("agent nodes run no backends; healthy nodes come first", () => {
  const nodes = [
    { id: "1", name: "b", status: "healthy" }, { id: "2", name: "a", status: "offline" },
    { id: "3", name: "agent", node_type: "agent", status: "healthy" }, { id: "4", name: "c", node_type: "backend", status: "healthy" },
  ];
  assert.deepEqual(backendNodes(nodes).map((n) => n.name), ["b", "c", "a"]);
  assert.equal(installable({ status: "draining" }), false);
});

test("one node installs on its own route, several through the fan-out; bad input names the field", () => {
  assert.deepEqual(installRequest(" piper ", ["n1"]), { path: "/api/nodes/n1/backends/install", body: { backend: "piper" } });
  assert.deepEqual(installRequest("piper", ["n1", "n2"]), { path: "/api/backends/install", body: { backend: "piper", node_ids: ["n1", "n2"] } });
  assert.throws(() => installRequest("", ["n1"]), /^Error: backend:/);
  assert.throws(() => installRequest("piper", []), /^Error: nodes:/);
});

test("a fan-out job reads as its roll-up, a single one as its state", () => {
  assert.equal(jobLine({ summary: "2 of 5 nodes done" }), "2 of 5 nodes done");
  assert.equal(jobLine({ state: "Downloading", message: "file 1" }), "Downloading: file 1");
  assert.equal(jobLine(null), "");
});

test("install suggestions are every backend installed anywhere", () => {
  assert.deepEqual(knownBackends({ a: [{ name: "simulator" }, { name: "piper" }], b: [{ name: "piper" }], c: { error: "x" } }), ["piper", "simulator"]);
});
