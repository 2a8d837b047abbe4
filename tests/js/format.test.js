import assert from "node:assert/strict";
import { test } from "node:test";
import { ago, bytes, duration, percent, shortRevision } from "../../src/corral/frontend/ui/js/format.js";

test("bytes in binary units, one decimal under ten", () => {
  assert.equal(bytes(0), "0 B");
  assert.equal(bytes(-5), "0 B");
  assert.equal(bytes(NaN), "0 B");
  assert.equal(bytes(512), "512 B");
  assert.equal(bytes(1536), "1.5 KiB");
  assert.equal(bytes(12 * 1024 ** 2), "12 MiB");
  assert.equal(bytes(3 * 1024 ** 5), "3072 TiB");
});

test("percent is clamped and safe on an empty whole", () => {
  assert.equal(percent(1, 4), 25);
  assert.equal(percent(5, 4), 100);
  assert.equal(percent(-1, 4), 0);
  assert.equal(percent(1, 0), 0);
});

test("durations in s, m and h", () => {
  assert.equal(duration(0.2), "1s");
  assert.equal(duration(59), "59s");
  assert.equal(duration(90), "2m");
  assert.equal(duration(5400), "1.5h");
  assert.equal(duration(Infinity), "");
});

test("ago reads an ISO time; missing is never", () => {
  assert.equal(ago(null), "never");
  assert.equal(ago(new Date().toISOString()), "just now");
  assert.equal(ago(new Date(Date.now() - 120_000).toISOString()), "2m ago");
  assert.equal(ago("not a date"), "");
});

test("a revision is shortened to 8 characters", () => {
  assert.equal(shortRevision("0123456789abcdef"), "01234567");
  assert.equal(shortRevision(""), "—");
});
