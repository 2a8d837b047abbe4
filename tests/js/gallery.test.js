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

test("gallery models: search over name, description and tags, fitting ones first", async () => {
  const { filterCatalog } = await import("../../src/corral/frontend/ui/js/pages/gallery.js");
  const models = [
    { id: "g@big", name: "big", fits: false, tags: ["chat"] },
    { id: "g@tiny", name: "tiny", fits: true, description: "A small chat model", tags: ["chat"] },
    { id: "g@embed", name: "embed", fits: null, tags: ["embeddings"] },
  ];
  assert.deepEqual(filterCatalog(models, "").map((m) => m.name), ["tiny", "embed", "big"]);
  assert.deepEqual(filterCatalog(models, "small").map((m) => m.name), ["tiny"]);
  assert.deepEqual(filterCatalog(models, "EMBEDDINGS").map((m) => m.name), ["embed"]);
  assert.deepEqual(filterCatalog(undefined, "x"), []);
});

test("a gallery install job: its phase and the line it shows", async () => {
  const { jobPhase, jobLine } = await import("../../src/corral/frontend/ui/js/pages/gallery.js");
  assert.equal(jobPhase(null), "idle");
  assert.equal(jobPhase({ processed: false }), "running");
  assert.equal(jobPhase({ processed: true, error: null }), "done");
  assert.equal(jobPhase({ processed: true, error: "sha256 mismatch" }), "failed");
  const running = { processed: false, phase: "file 1 of 2", file_name: "tiny.gguf", downloaded_size: "1.0 MB", file_size: "4.2 MB" };
  assert.equal(jobLine(running), "file 1 of 2 · tiny.gguf: 1.0 MB of 4.2 MB");
  assert.equal(jobLine({ processed: false }), "starting…");
  assert.equal(jobLine({ processed: true, error: "tiny.gguf: sha256 mismatch" }), "tiny.gguf: sha256 mismatch");
});
