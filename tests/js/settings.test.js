// Pure helpers of the Settings page: what a save sends, and the sections shown.
import assert from "node:assert/strict";
import test from "node:test";

import { changedSettings, KNOWN, sections } from "../../src/corral/frontend/ui/js/pages/settings.js";

test("a save sends only the settings the form changed", () => {
  const server = { distributed_disk_headroom_check: true };
  assert.deepEqual(changedSettings(server, { distributed_disk_headroom_check: false }), { distributed_disk_headroom_check: false });
  assert.deepEqual(changedSettings(server, { distributed_disk_headroom_check: true }), {});
  assert.deepEqual(changedSettings(server, {}), {});
});

test("the disk headroom check is under Distributed, unknown server settings under Other", () => {
  const shown = sections({ distributed_disk_headroom_check: true, some_future_knob: 3 });
  assert.deepEqual(shown.map(([name]) => name), ["Distributed", "Other"]);
  assert.equal(shown[0][1][0].label, "Disk headroom check");
  assert.equal(shown[1][1][0].key, "some_future_knob");
  assert.ok(KNOWN.every((s) => s.help));
  assert.deepEqual(sections({ distributed_disk_headroom_check: false }).map(([name]) => name), ["Distributed"]);
});
