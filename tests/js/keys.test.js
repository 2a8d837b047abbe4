// Pure helpers of the API keys page: the create and PATCH bodies a form gives, and a key's limits as text.
import assert from "node:assert/strict";
import test from "node:test";

import { createBody, formOf, limitsText, parseLimit, parseModels, policyChanges, revokeQuestion } from "../../src/corral/frontend/ui/js/pages/keys.js";

const ROW = { id: "k1", name: "ci", role: "user", tenant: "ci", models: [], rpm: 0, tpm: 0, tokens_per_day: 0, tokens_per_month: 0, priority: "normal" };

test("allowed models are split on commas and spaces", () => {
  assert.deepEqual(parseModels(" llama-*, embedder  sim "), ["llama-*", "embedder", "sim"]);
  assert.deepEqual(parseModels(""), []);
});

test("a limit is a whole number; empty is unlimited; anything else names the field", () => {
  assert.equal(parseLimit("", "rpm"), 0);
  assert.equal(parseLimit("1_000", "rpm"), 1000);
  assert.throws(() => parseLimit("-3", "Requests / min (rpm)"), /Requests \/ min \(rpm\) must be a whole number/);
  assert.throws(() => parseLimit("1.5", "tpm"), /tpm/);
});

test("a new key's body leaves an empty tenant to the server (the key's name)", () => {
  const body = createBody({ name: " team ", role: "user", tenant: "", models: "a,b", rpm: "60", tpm: "", tokens_per_day: "", tokens_per_month: "9", priority: "high" });
  assert.deepEqual(body, { name: "team", role: "user", models: ["a", "b"], priority: "high", rpm: 60, tpm: 0, tokens_per_day: 0, tokens_per_month: 9 });
});

test("a scope change sends only the changed fields", () => {
  const form = { ...formOf(ROW), rpm: "30", models: "sim", priority: "low" };
  assert.deepEqual(policyChanges(ROW, form), { models: ["sim"], rpm: 30, priority: "low" });
  assert.deepEqual(policyChanges(ROW, formOf(ROW)), {});
  assert.deepEqual(policyChanges(ROW, { ...formOf(ROW), tenant: "" }), {}); // a tenant is changed, never emptied
});

test("limits read as text", () => {
  assert.equal(limitsText(ROW), "unlimited");
  assert.equal(limitsText({ ...ROW, rpm: 60, tokens_per_day: 1000 }), `60 requests / min · ${(1000).toLocaleString()} tokens / day`);
});

test("revoking the admin key this tab signed in with says so", () => {
  const admin = { ...ROW, name: "bootstrap", role: "admin", key_prefix: "corral-ab" };
  assert.match(revokeQuestion(admin, "corral-abcdef"), /you will be logged out/);
  assert.doesNotMatch(revokeQuestion(admin, "corral-zz"), /logged out/);
  assert.doesNotMatch(revokeQuestion({ ...ROW, key_prefix: "corral-ab" }, "corral-abcdef"), /logged out/);
});
