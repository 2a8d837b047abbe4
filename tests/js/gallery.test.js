// Pure helpers of the Model gallery page: the budget line, filters and the state of an install.
import assert from "node:assert/strict";
import test from "node:test";

import { allCapabilities, budgetLine, filterModels, fitTone, loadPhase } from "../../src/corral/frontend/ui/js/pages/gallery.js";

test("the budget line names the node every verdict is sized against", () => {
  const line = budgetLine({ enabled: true, node_name: "dgx-01", total_memory: 80 * 2 ** 30, is_gpu: true, node_count: 4 });
  assert.equal(line, "Sized against dgx-01 (80 GiB VRAM), the largest of 4 healthy nodes.");
  assert.match(budgetLine(undefined), /this host/);
  assert.match(budgetLine({ enabled: true, node_name: "cpu", total_memory: 1024, is_gpu: false, node_count: 1 }), /RAM\), the only healthy node/);
});

test("models that fit come first; search and capability filter", () => {
  const models = [
    { name: "big", fits: false, capabilities: ["chat"] },
    { name: "small", fits: true, backend: "llama-cpp", capabilities: ["chat"] },
    { name: "odd", fits: null, capabilities: ["embeddings"] },
  ];
  assert.deepEqual(filterModels(models, "", "").map((m) => m.name), ["small", "odd", "big"]);
  assert.deepEqual(filterModels(models, "LLAMA", "").map((m) => m.name), ["small"]);
  assert.deepEqual(filterModels(models, "", "embeddings").map((m) => m.name), ["odd"]);
  assert.deepEqual(allCapabilities(models), ["chat", "embeddings"]);
});

test("fit tones and install phases", () => {
  assert.equal(fitTone(true), "ok");
  assert.equal(fitTone(false), "danger");
  assert.equal(fitTone(null), "muted");
  assert.equal(loadPhase(null), "idle");
  assert.equal(loadPhase({ state: "staging", progress: 40 }), "running");
  assert.equal(loadPhase({ state: "loaded" }), "ready");
  assert.equal(loadPhase({ state: "failed", error: "boom" }), "failed");
});
