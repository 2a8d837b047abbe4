// Pure helpers of the Dashboard page: the last point a chart exposes, the empty state, uPlot's data shape.
import assert from "node:assert/strict";
import test from "node:test";

import {
  chartData, formatLast, formatValue, hasTraffic, lastValue, modelOrder, slug, sparse, TRAFFIC_CHARTS, yTop,
} from "../../src/corral/frontend/ui/js/pages/dashboard.js";

test("the last point skips the trailing buckets without a sample", () => {
  assert.equal(lastValue([1, 2.5, null, null]), 2.5);
  assert.equal(lastValue([null, null]), null);
  assert.equal(lastValue(undefined), null);
  assert.equal(lastValue([0]), 0);
});

test("data-last is a plain number with two decimals at most, empty without a point", () => {
  assert.equal(formatLast(12.3456), "12.35");
  assert.equal(formatLast(0), "0");
  assert.equal(formatLast(null), "");
});

test("axis values read in their unit", () => {
  assert.equal(formatValue(1536, "bytes"), "1.5 KiB");
  assert.equal(formatValue(250.4, "ms"), "250 ms");
  assert.equal(formatValue(2500, "ms"), "2.5 s");
  assert.equal(formatValue(null, "rate"), "—");
  assert.equal(formatValue(0.123, "rate"), "0.12");
});

test("no traffic until a request, a token or something in flight is seen", () => {
  assert.equal(hasTraffic(undefined), false);
  assert.equal(hasTraffic({ t: [] }), false);
  assert.equal(hasTraffic({ t: [1, 2], requests_per_s: [null, 0], in_flight: [0, 0] }), false);
  assert.equal(hasTraffic({ t: [1, 2], requests_per_s: [null, 0.2] }), true);
  assert.equal(hasTraffic({ t: [1, 2], queued: [3, null] }), true);
});

test("chart data aligns every line with the time axis, nulls where a series is short or absent", () => {
  const spec = TRAFFIC_CHARTS.find((c) => c.id === "requests");
  const data = chartData({ t: [10, 15, 20], requests_per_s: [1, null, 2] }, spec.lines);
  assert.deepEqual(data, [[10, 15, 20], [1, null, 2], [null, null, null]]);
  assert.deepEqual(chartData(undefined, spec.lines), [[], [], []]);
});

test("the model selector lists the busiest model first", () => {
  const models = { quiet: { requests_per_s: [0, 0.1] }, busy: { requests_per_s: [3, null] }, alpha: { requests_per_s: [0, 0.1] } };
  assert.deepEqual(modelOrder(models), ["busy", "alpha", "quiet"]);
  assert.deepEqual(modelOrder(undefined), []);
});

test("node names become test ids", () => {
  assert.equal(slug("GPU A.local"), "gpu-a-local");
});

test("the y axis tops a little above the highest point, or at a readable scale when empty", () => {
  assert.ok(Math.abs(yTop(10, "rate") - 11) < 1e-9);
  assert.equal(yTop(null, "bytes"), 2 ** 30);
  assert.equal(yTop(0, "ms"), 10);
  assert.equal(yTop(undefined, "count"), 1);
  assert.equal(formatValue(2.5, "ms"), "2.5 ms");
});

test("a series of few samples is drawn with points", () => {
  assert.equal(sparse([null, 1, null, 2]), true);
  assert.equal(sparse(Array.from({ length: 100 }, (_, i) => i)), false);
  assert.equal(sparse(undefined), true);
});
