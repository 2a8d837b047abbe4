// Pure helpers of the operations strip: the fan-out roll-up and the items shown.
import assert from "node:assert/strict";
import test from "node:test";

import { rollup, stripItems } from "../../src/corral/frontend/ui/js/ops_strip.js";

const node = (state) => ({ state, node_id: state, node_name: state });

test("a fan-out rolls up as N of M nodes done, with failures and busy workers", () => {
  const up = rollup({ nodes: [node("Done"), node("Done"), node("Downloading"), node("Failed"), node("Worker busy")] });
  assert.equal(up.text, "2 of 5 nodes done, 1 failed, 1 worker(s) busy");
  assert.equal(rollup({}), null);
});

test("the strip shows one item per live operation, hidden (none) when nothing runs", () => {
  assert.deepEqual(stripItems({ operations: [] }), []);
  assert.deepEqual(stripItems(null), []);
  const [fan, one] = stripItems({ operations: [
    { jobID: "j1", name: "piper", taskType: "fanout", progress: 40, nodes: [node("Done"), node("Downloading")] },
    { jobID: "j2", name: "piper", taskType: "backend_install", progress: 250, nodeName: "gpu-a", message: "queued" },
  ] });
  assert.equal(fan.title, "Installing piper");
  assert.equal(fan.summary, "1 of 2 nodes done");
  assert.equal(fan.where, "2 nodes");
  assert.equal(one.pct, 100);
  assert.equal(one.where, "on gpu-a");
  assert.equal(one.summary, "queued");
});
